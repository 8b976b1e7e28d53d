/**
 * Reads a Markdown page of the documentation (README.md, docs/**.md) into what the doc tests check: fenced code blocks (with the section they sit in
 * and the `<!-- snippet: ... -->` marker before them), inline code spans, and flag tables. A marker
 * is one line, `<!-- snippet: key=value key="a value" -->`, and applies to the code block or table
 * right after it (blank lines between are allowed):
 *
 * - `file=<name>`: the block is written to this file name (other blocks import it);
 * - `prelude=<a,b>`: prepend these preludes (test/docs/preludes.ts) before typechecking;
 * - `skip="<reason>"`: do not check the block, for this reason;
 * - `flags=<command>`: the table after it lists flags of `relaybus <command>`.
 *
 * Anything malformed (an unknown key, a marker followed by nothing it can apply to) is reported in
 * `problems`, never ignored.
 */

/** A `<!-- snippet: ... -->` marker. */
export interface Marker {
  /** 1-based line in the page. */
  readonly line: number;
  readonly file?: string;
  readonly preludes: readonly string[];
  readonly skip?: string;
  readonly flags?: string;
}

/** A fenced code block. */
export interface CodeBlock {
  /** The info string's first word: `ts`, `sh`, ... (empty when none). */
  readonly lang: string;
  readonly code: string;
  /** 1-based line of the opening fence: the block's first code line is `line + 1`. */
  readonly line: number;
  /** The text of the `##` heading the block is under. */
  readonly section: string;
  /** The page it is on, relative to the repository (`README.md`, `docs/guide/workers.md`). */
  readonly page: string;
  readonly marker?: Marker;
}

/** A table of flags of one command (after a `flags=` marker). */
export interface FlagTable {
  readonly line: number;
  /** The command's words after `relaybus`, e.g. `worker`. */
  readonly command: string;
  readonly flags: readonly { readonly flag: string; readonly line: number }[];
}

/** An inline code span outside code blocks. */
export interface InlineCode {
  readonly text: string;
  readonly line: number;
}

export interface PageParts {
  readonly blocks: readonly CodeBlock[];
  readonly tables: readonly FlagTable[];
  readonly inline: readonly InlineCode[];
  /** Malformed or dangling markers, one message each. */
  readonly problems: readonly string[];
}

const MARKER = /^<!--\s*snippet:(.*?)-->$/;
const ATTRIBUTE = /\s*([a-z]+)=(?:"([^"]*)"|([^\s"]+))/y;
const FENCE = /^(`{3,}|~{3,})\s*([\w-]*)/;
const FLAG = /(?<![\w-])--[a-z][a-z0-9-]*/g;

function parseMarker(body: string, page: string, line: number, problems: string[]): Marker {
  const values: Record<string, string> = {};
  ATTRIBUTE.lastIndex = 0;
  let at = 0;
  for (let match = ATTRIBUTE.exec(body); match !== null; match = ATTRIBUTE.exec(body)) {
    values[match[1]!] = match[2] ?? match[3]!;
    at = ATTRIBUTE.lastIndex;
  }
  if (body.slice(at).trim() !== '')
    problems.push(
      `${page}:${line}: cannot read the marker attributes "${body.trim()}" (write key=value or key="a value")`,
    );
  const unknown = Object.keys(values).filter((key) => !['file', 'prelude', 'skip', 'flags'].includes(key));
  if (unknown.length > 0)
    problems.push(`${page}:${line}: unknown marker key ${unknown.join(', ')} (file, prelude, skip, flags)`);
  if (values.skip !== undefined && values.skip.trim().length < 10)
    problems.push(`${page}:${line}: skip needs a reason, e.g. skip="needs a running mail server"`);
  return {
    line,
    ...(values.file !== undefined ? { file: values.file } : {}),
    preludes:
      values.prelude === undefined
        ? []
        : values.prelude
            .split(',')
            .map((name) => name.trim())
            .filter(Boolean),
    ...(values.skip !== undefined ? { skip: values.skip } : {}),
    ...(values.flags !== undefined ? { flags: values.flags } : {}),
  };
}

/** Split a page into code blocks, inline code spans, flag tables and marker problems; `page` names it in messages. */
export function parseMarkdown(text: string, page: string): PageParts {
  const lines = text.split('\n');
  const blocks: CodeBlock[] = [];
  const tables: FlagTable[] = [];
  const inline: InlineCode[] = [];
  const problems: string[] = [];
  let section = '';
  let pending: Marker | undefined;
  let open: { fence: string; lang: string; line: number; body: string[]; marker?: Marker } | undefined;
  let table: { line: number; command: string; flags: { flag: string; line: number }[] } | undefined;

  for (let index = 0; index < lines.length; index += 1) {
    const raw = lines[index]!;
    const number = index + 1;
    if (open !== undefined) {
      if (raw.trim().startsWith(open.fence) && raw.trim().replace(/[`~]/g, '') === '') {
        blocks.push({
          lang: open.lang,
          code: open.body.join('\n'),
          line: open.line,
          section,
          page,
          ...(open.marker ? { marker: open.marker } : {}),
        });
        open = undefined;
      } else {
        open.body.push(raw);
      }
      continue;
    }
    const trimmed = raw.trim();
    if (table !== undefined) {
      if (trimmed.startsWith('|')) {
        const first = trimmed.split('|')[1] ?? '';
        if (!/^\s*-+\s*$/.test(first) && /`/.test(first)) {
          for (const flag of first.match(FLAG) ?? []) table.flags.push({ flag, line: number });
        }
      } else {
        tables.push(table);
        table = undefined;
      }
    }
    const marker = MARKER.exec(trimmed);
    if (marker) {
      if (pending)
        problems.push(`${page}:${pending.line}: marker is followed by another marker, not by a code block or table`);
      pending = parseMarker(marker[1]!, page, number, problems);
      continue;
    }
    const fence = FENCE.exec(trimmed);
    if (fence) {
      if (pending?.flags !== undefined)
        problems.push(`${page}:${pending.line}: a flags= marker must precede a table, not a code block`);
      open = {
        fence: fence[1]!,
        lang: fence[2]!.toLowerCase(),
        line: number,
        body: [],
        ...(pending && pending.flags === undefined ? { marker: pending } : {}),
      };
      pending = undefined;
      continue;
    }
    if (trimmed === '') continue;
    if (pending !== undefined) {
      if (pending.flags !== undefined && trimmed.startsWith('|')) {
        table = { line: number, command: pending.flags, flags: [] };
        index -= 1; // read this header row as a table row above
      } else {
        problems.push(
          `${page}:${pending.line}: marker is not followed by ${pending.flags !== undefined ? 'a table' : 'a code block'}`,
        );
      }
      pending = undefined;
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(trimmed);
    if (heading) {
      if (heading[1] === '##') section = heading[2]!;
      continue;
    }
    for (const match of raw.matchAll(/(?<!`)`([^`]+)`(?!`)/g)) inline.push({ text: match[1]!, line: number });
  }
  if (table !== undefined) tables.push(table);
  if (open !== undefined) problems.push(`${page}:${open.line}: code block never closed`);
  if (pending !== undefined) problems.push(`${page}:${pending.line}: marker at the end of the file applies to nothing`);
  return { blocks, tables, inline, problems };
}
