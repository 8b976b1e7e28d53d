/**
 * A small lexer for the SQL of `sql/` and of the setup scripts, shared by the drivers that cannot
 * hand relaybus's `(text, params)` to their database as is:
 *
 * - Drizzle builds queries from `sql` chunks, so `$N` placeholders become `sql.param()` chunks
 *   (`placeholderChunks`);
 * - postgres.js serialises a parameter by the type the server infers, so a JSON text cast with
 *   `$N::jsonb` must be declared as text (`jsonCastParams`);
 * - PGlite (and Drizzle over it) runs one statement per call, so setup scripts are split
 *   (`splitStatements`).
 *
 * It knows just enough of Postgres's lexical rules to never mistake text for a placeholder or a
 * statement end: `--` and nested `/* *\/` comments, '…' strings (with E'…' backslash escapes),
 * "…" identifiers and $tag$…$tag$ strings.
 */

/** One piece of a statement: literal SQL text, or the 1-based number of a `$N` placeholder. */
export type SqlChunk = string | number;

const IDENTIFIER_CHAR = /[A-Za-z0-9_$\u0080-\uffff]/;
const DOLLAR_TAG = /^\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/;

interface Token {
  readonly kind: 'text' | 'placeholder' | 'semicolon';
  readonly start: number;
  readonly end: number;
  /** For placeholders: the parameter number. */
  readonly index?: number;
}

/** End of the quoted run that starts at `start` (the opening quote), past the closing quote. */
function endOfQuoted(text: string, start: number, quote: string, backslashEscapes: boolean): number {
  let i = start + 1;
  while (i < text.length) {
    const c = text[i];
    if (backslashEscapes && c === '\\') {
      i += 2;
    } else if (c === quote) {
      if (text[i + 1] === quote)
        i += 2; // a doubled quote stands for itself
      else return i + 1;
    } else {
      i += 1;
    }
  }
  return text.length;
}

function endOfBlockComment(text: string, start: number): number {
  let depth = 0;
  let i = start;
  while (i < text.length) {
    if (text.startsWith('/*', i)) {
      depth += 1;
      i += 2;
    } else if (text.startsWith('*/', i)) {
      depth -= 1;
      i += 2;
      if (depth === 0) return i;
    } else {
      i += 1;
    }
  }
  return text.length;
}

function* tokens(text: string): Generator<Token> {
  let i = 0;
  let textStart = 0;
  const flush = function* (end: number): Generator<Token> {
    if (end > textStart) yield { kind: 'text', start: textStart, end };
  };
  while (i < text.length) {
    const c = text[i]!;
    const previous = i > 0 ? text[i - 1]! : '';
    if (c === '-' && text[i + 1] === '-') {
      const newline = text.indexOf('\n', i);
      i = newline === -1 ? text.length : newline + 1;
    } else if (c === '/' && text[i + 1] === '*') {
      i = endOfBlockComment(text, i);
    } else if (c === "'") {
      const escaped = (previous === 'E' || previous === 'e') && (i < 2 || !IDENTIFIER_CHAR.test(text[i - 2]!));
      i = endOfQuoted(text, i, "'", escaped);
    } else if (c === '"') {
      i = endOfQuoted(text, i, '"', false);
    } else if (c === '$' && !IDENTIFIER_CHAR.test(previous)) {
      const digits = /^\$(\d+)/.exec(text.slice(i, i + 12));
      const tag = digits ? null : DOLLAR_TAG.exec(text.slice(i, i + 80));
      if (digits) {
        yield* flush(i);
        const end = i + digits[0].length;
        yield { kind: 'placeholder', start: i, end, index: Number(digits[1]) };
        i = end;
        textStart = end;
      } else if (tag) {
        const close = text.indexOf(tag[0], i + tag[0].length);
        i = close === -1 ? text.length : close + tag[0].length;
      } else {
        i += 1;
      }
    } else if (c === ';') {
      yield* flush(i);
      yield { kind: 'semicolon', start: i, end: i + 1 };
      i += 1;
      textStart = i;
    } else {
      i += 1;
    }
  }
  yield* flush(text.length);
}

const chunkCache = new Map<string, readonly SqlChunk[]>();

/**
 * The statement as literal text and `$N` placeholders, in order (cached per text).
 *
 * ```ts
 * placeholderChunks("SELECT $1::text -- not $2\n, '$3'"); // ['SELECT ', 1, "::text -- not $2\n, '$3'"]
 * ```
 */
export function placeholderChunks(text: string): readonly SqlChunk[] {
  let chunks = chunkCache.get(text);
  if (chunks === undefined) {
    const built: SqlChunk[] = [];
    for (const token of tokens(text)) {
      const piece = token.kind === 'placeholder' ? token.index! : text.slice(token.start, token.end);
      const last = built[built.length - 1];
      if (typeof piece === 'string' && typeof last === 'string') built[built.length - 1] = last + piece;
      else built.push(piece);
    }
    chunks = Object.freeze(built);
    chunkCache.set(text, chunks);
  }
  return chunks;
}

const jsonCache = new Map<string, ReadonlySet<number>>();

/** Numbers of the parameters the statement casts to `json` or `jsonb` (`$1::jsonb`), cached per text. */
export function jsonCastParams(text: string): ReadonlySet<number> {
  let found = jsonCache.get(text);
  if (found === undefined) {
    const numbers = new Set<number>();
    for (const token of tokens(text)) {
      if (token.kind === 'placeholder' && /^\s*::\s*jsonb?(?![\w[])/i.test(text.slice(token.end, token.end + 16)))
        numbers.add(token.index!);
    }
    found = numbers;
    jsonCache.set(text, found);
  }
  return found;
}

/** The statements of a script, split at top-level semicolons; empty and comment-only pieces are dropped. */
export function splitStatements(script: string): string[] {
  const statements: string[] = [];
  let start = 0;
  const push = (end: number) => {
    const statement = script.slice(start, end).trim();
    if (
      statement
        .replace(/--.*$/gm, '')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .trim().length > 0
    )
      statements.push(statement);
  };
  for (const token of tokens(script)) {
    if (token.kind !== 'semicolon') continue;
    push(token.start);
    start = token.end;
  }
  push(script.length);
  return statements;
}
