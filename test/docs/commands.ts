/**
 * Finds the `relaybus` invocations in README text (shell lines, inline code, a Dockerfile `CMD`),
 * and the flags a command's `--help` declares, so the doc test can check that every subcommand and
 * flag the README names exists.
 */

/** One `relaybus <words> --flags` the README names. */
export interface Invocation {
  /** The subcommand: `['worker']`, `['dead', 'requeue']`, `['handlers', 'pause']`. */
  readonly words: readonly string[];
  /** Long flags named after it, without values: `--concurrency`. */
  readonly flags: readonly string[];
  /** Every argument after `relaybus`, as written (redirections and comments cut off). */
  readonly args: readonly string[];
}

const FLAG = /(?<![\w-])--[a-z][a-z0-9-]*/g;
const WORD = /^[a-z][a-z-]*$/;

/** The invocation in `tokens` (a command's words), when it runs the relaybus bin. */
function invocationOf(tokens: readonly string[]): Invocation | undefined {
  let rest = [...tokens];
  while (rest.length > 0 && /^[A-Z_][A-Z0-9_]*=/.test(rest[0]!)) rest.shift(); // VAR=value prefixes
  if (rest[0] === 'npx') rest.shift();
  if (rest[0] !== undefined && /(^|\/)relaybus$/.test(rest[0])) rest = rest.slice(1);
  else if (rest[0] === 'node' && rest[1] !== undefined && /(^|\/)relaybus\/dist\/src\/cli\/main\.js$/.test(rest[1]))
    rest = rest.slice(2);
  else return undefined;
  // A redirection (`> file`, `2>&1`, `< in`) or a comment ends the arguments; a placeholder `<id>` does not.
  const cut = rest.findIndex((token) => /^(\d?>|<(?![\w-]+>)|#)/.test(token));
  const args = cut < 0 ? rest : rest.slice(0, cut);
  const first = args[0];
  if (first === undefined || !WORD.test(first)) return undefined;
  // The commands of two words: `dead list`, `handlers pause`, `replay backfill`.
  const words =
    (first === 'dead' || first === 'handlers' || first === 'replay') && args[1] !== undefined && WORD.test(args[1])
      ? [first, args[1]]
      : [first];
  const flags = args.slice(words.length).join(' ').match(FLAG) ?? [];
  return { words, flags: [...new Set(flags)], args };
}

/** The relaybus invocations of one shell line (`a && b; c | d`, `# comments`, `VAR=x npx relaybus ...`). */
export function invocationsInShell(line: string): Invocation[] {
  const code = line.replace(/(^|\s)#.*$/, '');
  return code
    .split(/&&|\|\||[;|()]/)
    .map((segment) => invocationOf(segment.trim().split(/\s+/).filter(Boolean)))
    .filter((found): found is Invocation => found !== undefined);
}

/** The invocation of an inline code span that starts with `relaybus ` or `npx relaybus `. */
export function invocationInSpan(text: string): Invocation | undefined {
  if (!/^(npx\s+)?relaybus\s/.test(text)) return undefined;
  return invocationOf(text.split(/\s+/));
}

/** The invocation of a Dockerfile `CMD [...]` or `ENTRYPOINT [...]` line in exec form. */
export function invocationInDockerfile(line: string): Invocation | undefined {
  const match = /^\s*(?:CMD|ENTRYPOINT)\s+(\[.*\])\s*$/.exec(line);
  if (!match) return undefined;
  const tokens = JSON.parse(match[1]!) as unknown;
  if (!Array.isArray(tokens) || !tokens.every((token) => typeof token === 'string')) return undefined;
  return invocationOf(tokens as string[]);
}

/** The long flags a `--help` text lists in its options (`  -h, --help`, `      --concurrency <n>  ...`). */
export function declaredFlags(help: string): Set<string> {
  const flags = new Set<string>();
  for (const line of help.split('\n')) {
    const match = /^\s+(?:-\w,\s+)?(--[a-z][a-z0-9-]*)/.exec(line);
    if (match) flags.add(match[1]!);
  }
  return flags;
}
