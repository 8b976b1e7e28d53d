import { parseArgs } from 'node:util';
import { UsageError } from './command.js';
import { parseDuration } from './duration.js';

/**
 * Flags are declared once per command as `FlagSpecs`: `node:util` `parseArgs` reads them, and the
 * `--help` text is rendered from the same descriptions, so the two never drift apart. Parse errors
 * and bad values become `UsageError`s (exit 2) that name the flag and point at `--help`.
 */

/** One flag: its `parseArgs` shape plus what `--help` says about it. */
export interface FlagSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  readonly multiple?: boolean;
  /** Placeholder of the value in `--help`, e.g. `n` renders `--concurrency <n>`. */
  readonly value?: string;
  readonly description: string;
}

/** The flags of one command, by long name. */
export type FlagSpecs = Readonly<Record<string, FlagSpec>>;

type FlagValue<S extends FlagSpec> = S['type'] extends 'boolean'
  ? S['multiple'] extends true
    ? boolean[]
    : boolean
  : S['multiple'] extends true
    ? string[]
    : string;

/** Parsed flag values: absent flags are undefined. */
export type FlagValues<T extends FlagSpecs> = { readonly [K in keyof T]?: FlagValue<T[K]> };

/** `--verbose`, accepted by every command. */
export const VERBOSE_FLAG = {
  verbose: { type: 'boolean', description: 'Print stack traces with errors.' },
} as const satisfies FlagSpecs;

/** `--help`, accepted by every command (handled before parsing, so it wins over bad flags). */
export const HELP_FLAG = {
  help: { type: 'boolean', short: 'h', description: 'Show this help.' },
} as const satisfies FlagSpecs;

/** `--database-url` and `--schema`, shared by the admin commands. */
export const DATABASE_FLAGS = {
  'database-url': {
    type: 'string',
    value: 'url',
    description: 'Postgres connection string. Default: the DATABASE_URL environment variable.',
  },
  schema: { type: 'string', value: 'name', description: 'Postgres schema of the relaybus tables. Default: relaybus.' },
} as const satisfies FlagSpecs;

/** `--json`, for commands with a table. */
export const JSON_FLAG = {
  json: { type: 'boolean', description: 'Print JSON instead of text (for scripts).' },
} as const satisfies FlagSpecs;

/** True when `args` asks for help (before any `--`). */
export function wantsHelp(args: readonly string[]): boolean {
  for (const arg of args) {
    if (arg === '--') return false;
    if (arg === '--help' || arg === '-h') return true;
  }
  return false;
}

/** Parse `args` against `specs`; throws `UsageError` for unknown flags, missing values and extra arguments. */
export function parseFlags<T extends FlagSpecs>(
  command: string,
  args: readonly string[],
  specs: T,
  options: { readonly maxPositionals?: number } = {},
): { values: FlagValues<T>; positionals: string[] } {
  const config: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> = {};
  for (const [name, spec] of Object.entries(specs)) {
    config[name] = {
      type: spec.type,
      ...(spec.short ? { short: spec.short } : {}),
      ...(spec.multiple ? { multiple: true } : {}),
    };
  }
  let parsed: { values: Record<string, unknown>; positionals: string[] };
  try {
    parsed = parseArgs({ args: [...args], options: config, strict: true, allowPositionals: true });
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      const first = (error as Error).message.split(/\.\s/)[0]!.replace(/\.$/, '');
      throw new UsageError(`${first.charAt(0).toLowerCase()}${first.slice(1)} (see relaybus ${command} --help)`);
    }
    throw error;
  }
  const max = options.maxPositionals ?? 0;
  if (parsed.positionals.length > max) {
    const extra = parsed.positionals[max];
    throw new UsageError(
      max === 0
        ? `relaybus ${command} takes no arguments, got "${extra}" (see relaybus ${command} --help)`
        : `unexpected argument "${extra}" (see relaybus ${command} --help)`,
    );
  }
  return { values: parsed.values as FlagValues<T>, positionals: parsed.positionals };
}

/** An integer flag in `min..max`; undefined when absent. */
export function integerFlag(name: string, raw: string | undefined, min: number, max: number): number | undefined {
  if (raw === undefined) return undefined;
  const value = /^\d+$/.test(raw.trim()) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new UsageError(`--${name} must be an integer from ${min} to ${max}, got "${raw}"`);
  }
  return value;
}

/** A duration flag (`500ms`, `2s`, `7d`, or plain milliseconds) in `minMs..maxMs`; undefined when absent. */
export function durationFlag(name: string, raw: string | undefined, minMs: number, maxMs: number): number | undefined {
  if (raw === undefined) return undefined;
  const value = parseDuration(raw);
  if (value === undefined) {
    throw new UsageError(
      `--${name} must be a duration such as 500ms, 30s, 12h or 7d (or plain milliseconds), got "${raw}"`,
    );
  }
  if (value < minMs || value > maxMs) {
    throw new UsageError(`--${name} must be between ${minMs} ms and ${maxMs} ms, got "${raw}" (${value} ms)`);
  }
  return value;
}

/** A flag that takes one of `choices`; undefined when absent. */
export function choiceFlag<const C extends readonly string[]>(
  name: string,
  raw: string | undefined,
  choices: C,
): C[number] | undefined {
  if (raw === undefined) return undefined;
  if (!choices.includes(raw)) throw new UsageError(`--${name} must be one of ${choices.join(', ')}, got "${raw}"`);
  return raw;
}

/** A comma-separated list flag, trimmed, without empty items; undefined when absent. */
export function listFlag(name: string, raw: string | undefined): string[] | undefined {
  if (raw === undefined) return undefined;
  const items = raw
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item.length > 0);
  if (items.length === 0)
    throw new UsageError(`--${name} needs at least one name, e.g. --${name} send-receipt,update-ledger`);
  return [...new Set(items)];
}

/**
 * Rewrite a flag with an optional value (`--watch` or `--watch 500`) into `--watch=<value>`, using
 * `fallback` when the next argument is not a value, so `parseArgs` (which has no optional values)
 * can read it.
 */
export function optionalValue(
  args: readonly string[],
  flag: string,
  fallback: string,
  isValue: (arg: string) => boolean,
): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i]!;
    if (arg === '--') {
      out.push(...args.slice(i));
      break;
    }
    if (arg === flag) {
      const next = args[i + 1];
      if (next !== undefined && isValue(next)) {
        out.push(`${flag}=${next}`);
        i += 1;
      } else {
        out.push(`${flag}=${fallback}`);
      }
    } else {
      out.push(arg);
    }
  }
  return out;
}

/** The help text of a command: usage, description, options rendered from `flags`, then extra sections. */
export function renderHelp(help: {
  readonly usage: readonly string[];
  readonly description: string;
  readonly flags: FlagSpecs;
  readonly sections?: readonly { readonly title: string; readonly lines: readonly string[] }[];
}): string {
  const lines: string[] = [];
  help.usage.forEach((usage, i) => lines.push(`${i === 0 ? 'Usage: ' : '       '}${usage}`));
  lines.push('', ...wrap(help.description, 80), '', 'Options:');
  const rows = Object.entries(help.flags).map(([name, spec]) => {
    const value = spec.type === 'string' ? ` <${spec.value ?? 'value'}>` : '';
    return [`${spec.short ? `-${spec.short}, ` : '    '}--${name}${value}`, spec.description] as const;
  });
  const width = Math.min(34, Math.max(...rows.map(([left]) => left.length)));
  for (const [left, description] of rows) {
    const text = wrap(description, 80 - width - 4);
    if (left.length > width) {
      lines.push(`  ${left}`);
      for (const line of text) lines.push(`  ${' '.repeat(width)}  ${line}`);
    } else {
      text.forEach((line, i) => lines.push(`  ${i === 0 ? left.padEnd(width) : ' '.repeat(width)}  ${line}`));
    }
  }
  for (const section of help.sections ?? [])
    lines.push('', `${section.title}:`, ...section.lines.map((line) => (line === '' ? '' : `  ${line}`)));
  return lines.join('\n') + '\n';
}

/** Word-wrap `text` at `width` columns; explicit newlines are kept. */
export function wrap(text: string, width: number): string[] {
  const out: string[] = [];
  for (const paragraph of text.split('\n')) {
    let line = '';
    for (const word of paragraph.split(/\s+/).filter(Boolean)) {
      if (line.length > 0 && line.length + 1 + word.length > width) {
        out.push(line);
        line = word;
      } else {
        line = line.length > 0 ? `${line} ${word}` : word;
      }
    }
    out.push(line);
  }
  return out;
}
