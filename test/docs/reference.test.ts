/**
 * The reference pages (docs/reference/) document everything the code has, once, and nothing it lacks. Each check
 * fails both ways, naming what is missing and where:
 *
 * - options: the `##` sections of configuration.md against the option names of the code (test/docs/reference-sets.ts:
 *   records the compiler holds to the options types; and where the code validates with a runtime list, the TypeBox
 *   schemas of createRelayBus, the dispatcher, the backoff and bus.on, and the publish option keys). Every exported
 *   `...Options` type of the package's entry points is documented in a section or excused there;
 * - commands and flags: the `## relaybus <command>` sections of cli.md and their `<!-- snippet: flags=... -->` tables
 *   against `relaybus --help` and `relaybus <command> --help` of the built bin;
 * - errors: the `##` sections of errors.md against the error classes the entry points export (read at run time), each
 *   section's `code` against the class's, and the codes against `RELAYBUS_ERROR_CODES`;
 * - lifecycle events: the `###` sections under `## bus.lifecycle` and `## inbox.lifecycle` of lifecycle-events.md and
 *   their field tables against the event maps (test/docs/reference-sets.ts).
 *
 * `RELAYBUS_DOCS_ROOT=<folder>` reads the pages of another copy (see test/docs/doc-set.ts), to watch this fail.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { BusSchema } from '../../src/bus/options.js';
import { PUBLISH_OPTION_KEYS } from '../../src/bus/bus.js';
import { RELAYBUS_ERROR_CODES } from '../../src/core/errors.js';
import { BackoffSchema, DispatcherSchema, HandlerSchema } from '../../src/core/options.js';
import { runCli, useBuiltCli } from '../cli/support.js';
import { declaredFlags } from './commands.js';
import { DOCS_ROOT, REPO_ROOT, docPage } from './doc-set.js';
import {
  BACKOFF_KEYS,
  BUS_EVENTS,
  BUS_KEYS,
  DELIVERY_FIELDS,
  DISPATCHER_KEYS,
  HANDLER_KEYS,
  INBOX_EVENTS,
  NOT_CONFIGURATION,
  OPTION_GROUPS,
  PUBLISH_KEYS,
} from './reference-sets.js';

useBuiltCli();

const CONFIGURATION = 'docs/reference/configuration.md';
const CLI = 'docs/reference/cli.md';
const ERRORS = 'docs/reference/errors.md';
const EVENTS = 'docs/reference/lifecycle-events.md';

/** A `##` or `###` section of a page: its heading, the names its tables list, its text. */
interface Section {
  readonly heading: string;
  readonly level: 2 | 3;
  readonly line: number;
  /** The first code span of the first cell of each row of its tables whose header starts with option, flag or field. */
  readonly rows: { readonly name: string; readonly cell: string; readonly line: number }[];
  readonly text: string[];
}

/** The `##` and `###` sections of `path`, outside code blocks, in page order. */
function sections(path: string): Section[] {
  const page = docPage(path);
  const found: Section[] = [];
  let current: Section | undefined;
  let fence: string | undefined;
  let table: 'listing' | 'other' | undefined;
  page.text.split('\n').forEach((raw, index) => {
    const line = index + 1;
    const trimmed = raw.trim();
    if (fence !== undefined) {
      if (trimmed.startsWith(fence)) fence = undefined;
      return;
    }
    const opening = /^(`{3,}|~{3,})/.exec(trimmed);
    if (opening) {
      fence = opening[1]!;
      return;
    }
    const heading = /^(#{2,3})\s+(.*)$/.exec(trimmed);
    if (heading) {
      current = { heading: heading[2]!.trim(), level: heading[1]!.length as 2 | 3, line, rows: [], text: [] };
      found.push(current);
      table = undefined;
      return;
    }
    if (current === undefined) return;
    current.text.push(raw);
    if (!trimmed.startsWith('|')) {
      table = undefined;
      return;
    }
    const first = trimmed.split(/(?<!\\)\|/)[1]?.trim() ?? '';
    if (table === undefined) {
      table = /^(option|flag|field)\b/.test(first) ? 'listing' : 'other';
      return;
    }
    if (table === 'other' || /^:?-+:?$/.test(first)) return;
    const span = /`([^`]+)`/.exec(first);
    current.rows.push({ name: span?.[1] ?? first, cell: first, line });
  });
  return found;
}

/** The rows of `section` and of the `###` sections under it. */
function rowsUnder(all: readonly Section[], section: Section): Section['rows'] {
  const start = all.indexOf(section);
  const rows = [...section.rows];
  for (const next of all.slice(start + 1)) {
    if (next.level <= section.level) break;
    rows.push(...next.rows);
  }
  return rows;
}

/** What `documented` lacks of `expected`, and what it names that `expected` lacks, as sorted lists. */
function compare(expected: Iterable<string>, documented: Iterable<string>): { missing: string[]; extra: string[] } {
  const want = new Set(expected);
  const have = new Set(documented);
  return {
    missing: [...want].filter((name) => !have.has(name)).sort(),
    extra: [...have].filter((name) => !want.has(name)).sort(),
  };
}

/** Fail with one message naming what is missing from `where` and what it names that `source` does not have. */
function assertSame(expected: Iterable<string>, documented: Iterable<string>, where: string, source: string): void {
  const { missing, extra } = compare(expected, documented);
  const problems = [
    ...(missing.length > 0 ? [`${where} does not document ${missing.join(', ')} (in ${source})`] : []),
    ...(extra.length > 0 ? [`${where} documents ${extra.join(', ')}, which ${source} does not have`] : []),
  ];
  assert.deepEqual(problems, [], problems.join('\n'));
}

/** Names listed twice in `rows`, with their lines. */
function duplicates(rows: Section['rows'], path: string): string[] {
  const seen = new Map<string, number>();
  const twice: string[] = [];
  for (const row of rows) {
    const first = seen.get(row.name);
    if (first !== undefined) twice.push(`${row.name} (${path}:${first} and ${row.line})`);
    else seen.set(row.name, row.line);
  }
  return twice;
}

describe('docs/reference/configuration.md documents every option, once', () => {
  const all = sections(CONFIGURATION);
  const groups = all.filter((section) => section.level === 2);

  it('has a ## section for each group of options, and no other', () => {
    assertSame(
      OPTION_GROUPS.map((group) => group.heading),
      groups.map((section) => section.heading),
      `${CONFIGURATION}'s ## headings`,
      'test/docs/reference-sets.ts OPTION_GROUPS',
    );
  });

  for (const group of OPTION_GROUPS) {
    it(`## ${group.heading} lists ${group.options.length} options`, () => {
      const section = groups.find((candidate) => candidate.heading === group.heading);
      assert.ok(section, `${CONFIGURATION} has no "## ${group.heading}" section`);
      const rows = rowsUnder(all, section);
      assertSame(
        group.options,
        rows.map((row) => row.name),
        `${CONFIGURATION} "## ${group.heading}" (line ${section.line})`,
        `the code (${group.types.join(', ') || 'its options'})`,
      );
      assert.deepEqual(duplicates(rows, CONFIGURATION), [], 'an option is listed twice');
    });
  }

  it('the option lists agree with what the code validates with at run time', () => {
    const keys = (schema: { properties: Record<string, unknown> }): string[] => Object.keys(schema.properties);
    assertSame(keys(BusSchema), BUS_KEYS, 'RelayBusOptions', 'BusSchema (src/bus/options.ts)');
    assertSame(keys(DispatcherSchema), DISPATCHER_KEYS, 'DispatcherOptions', 'DispatcherSchema (src/core/options.ts)');
    assertSame(keys(BackoffSchema), BACKOFF_KEYS, 'BackoffOptions', 'BackoffSchema (src/core/options.ts)');
    assertSame(keys(HandlerSchema), HANDLER_KEYS, 'HandlerOptions', 'HandlerSchema (src/core/options.ts)');
    assertSame(PUBLISH_OPTION_KEYS, PUBLISH_KEYS, 'PublishOptions', 'PUBLISH_OPTION_KEYS (src/bus/bus.ts)');
  });

  it('every options type the package exports is documented in a group, or excused', () => {
    const covered = new Set(OPTION_GROUPS.flatMap((group) => group.types));
    const exported = new Set<string>();
    const read = new Set<string>();
    const scan = (file: string): void => {
      if (read.has(file)) return;
      read.add(file);
      const text = readFileSync(join(REPO_ROOT, file), 'utf8');
      for (const statement of text.match(/^export\s+(?:type\s+)?(?:\{[^}]*\}|interface\s+\w+|type\s+\w+)/gm) ?? [])
        for (const name of statement.match(/\b[A-Z]\w*Options\b/g) ?? []) exported.add(name);
      for (const [, target] of text.matchAll(/^export \* from '(\.[^']+)\.js';/gm))
        scan(join(dirname(file), `${target}.ts`));
    };
    entryFiles().forEach(scan);
    const unknown = [...exported].filter((name) => !covered.has(name) && NOT_CONFIGURATION[name] === undefined);
    assert.deepEqual(
      unknown.sort(),
      [],
      'exported options types that no group of test/docs/reference-sets.ts documents (add a group and a section of ' +
        `${CONFIGURATION}, or excuse them in NOT_CONFIGURATION)`,
    );
    const stale = [...covered, ...Object.keys(NOT_CONFIGURATION)].filter((name) => !exported.has(name));
    assert.deepEqual(stale.sort(), [], 'test/docs/reference-sets.ts names options types the package does not export');
  });
});

/** The source file of each entry point package.json exports (`relaybus`, `relaybus/postgres`, ...). */
function entryFiles(): string[] {
  const manifest = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
    exports: Record<string, string | { types?: string }>;
  };
  return Object.values(manifest.exports)
    .map((target) => (typeof target === 'string' ? undefined : target.types))
    .filter((types): types is string => types?.startsWith('./dist/src/') === true)
    .map((types) => types.replace(/^\.\/dist\//, '').replace(/\.d\.ts$/, '.ts'));
}

describe('docs/reference/cli.md documents every command and flag, once', () => {
  const all = sections(CLI);
  const page = docPage(CLI);

  /** The commands `relaybus --help` lists: `worker`, `dead list`, ... */
  async function commands(): Promise<string[]> {
    const help = await runCli(['--help']);
    assert.equal(help.code, 0, help.stderr);
    const block = /\nCommands:\n([\s\S]*?)\n\n/.exec(help.stdout)?.[1] ?? '';
    const names = block
      .split('\n')
      .map((line) => /^\s+([a-z][a-z-]*(?: [a-z][a-z-]*)?)\s{2,}/.exec(line)?.[1])
      .filter((name): name is string => name !== undefined);
    assert.ok(names.length > 5, `relaybus --help lists its commands:\n${help.stdout}`);
    return names;
  }

  it('has a "## relaybus <command>" section for every command of relaybus --help, and no other', async () => {
    assertSame(
      await commands(),
      all.filter((s) => s.level === 2 && s.heading.startsWith('relaybus ')).map((s) => s.heading.slice(9)),
      `${CLI}'s "## relaybus <command>" headings`,
      'relaybus --help',
    );
  });

  it('the flags table of every command lists exactly the flags of its --help', async () => {
    const problems: string[] = [];
    for (const command of await commands()) {
      const help = await runCli([...command.split(' '), '--help']);
      assert.equal(help.code, 0, `relaybus ${command} --help: ${help.stderr}`);
      const declared = [...declaredFlags(help.stdout)].filter((flag) => flag !== '--help');
      const tables = page.parts.tables.filter((table) => table.command === command);
      if (tables.length !== 1) {
        problems.push(
          `${CLI} has ${tables.length} tables marked <!-- snippet: flags=${command.includes(' ') ? `"${command}"` : command} --> (one wanted)`,
        );
        continue;
      }
      const { missing, extra } = compare(
        declared,
        tables[0]!.flags.map((row) => row.flag),
      );
      if (missing.length > 0)
        problems.push(`${CLI}:${tables[0]!.line}: relaybus ${command} lacks ${missing.join(', ')} (in its --help)`);
      if (extra.length > 0)
        problems.push(`${CLI}:${tables[0]!.line}: relaybus ${command} lists ${extra.join(', ')}, not in its --help`);
    }
    const known = new Set(await commands());
    for (const table of page.parts.tables)
      if (!known.has(table.command)) problems.push(`${CLI}:${table.line}: flags=${table.command} is not a command`);
    assert.deepEqual(problems, [], problems.join('\n'));
  });

  it('## Global options lists the flags of relaybus --help', async () => {
    const section = all.find((s) => s.heading === 'Global options');
    assert.ok(section, `${CLI} has a "## Global options" section`);
    const help = await runCli(['--help']);
    assertSame(
      declaredFlags(help.stdout),
      section.rows.flatMap((row) => row.cell.match(/(?<![\w-])--[a-z][a-z0-9-]*/g) ?? []),
      `${CLI} "## Global options"`,
      'relaybus --help',
    );
  });
});

/** The error classes the entry points export, by name, with their code (undefined for the ones with none). */
async function errorClasses(): Promise<Map<string, { code: string | undefined; from: string }>> {
  const found = new Map<string, { code: string | undefined; from: string }>();
  for (const file of entryFiles()) {
    const module = (await import(pathToFileURL(join(REPO_ROOT, file)).href)) as Record<string, unknown>;
    for (const [name, value] of Object.entries(module)) {
      if (typeof value !== 'function' || !(value.prototype instanceof Error) || found.has(name)) continue;
      found.set(name, { code: codeOf(value as new (...args: unknown[]) => Error), from: file });
    }
  }
  return found;
}

/** The `code` an instance of `type` carries: its own, or (when it cannot be made from a message) its base class's. */
function codeOf(type: new (...args: unknown[]) => Error): string | undefined {
  for (let current: unknown = type; typeof current === 'function' && current !== Error; ) {
    try {
      const code = (new (current as new (message: string) => Error)('message') as { code?: unknown }).code;
      return typeof code === 'string' ? code : undefined;
    } catch {
      current = Object.getPrototypeOf(current);
    }
  }
  return undefined;
}

describe('docs/reference/errors.md documents every error class and code, once', () => {
  const all = sections(ERRORS).filter((section) => section.level === 2);

  it('has a ## section for every exported error class, and no other', async () => {
    const classes = await errorClasses();
    assertSame(
      classes.keys(),
      all.map((section) => section.heading),
      `${ERRORS}'s ## headings`,
      `the error classes exported by ${[...new Set([...classes.values()].map((c) => c.from))].join(', ')}`,
    );
  });

  it("each section names its class's code (`code`: `RELAYBUS_...`), and a class without one names none", async () => {
    const problems: string[] = [];
    for (const [name, { code }] of await errorClasses()) {
      const section = all.find((candidate) => candidate.heading === name);
      if (section === undefined) continue; // the test above names it
      const named = [...section.text.join('\n').matchAll(/`code`: `([A-Z_]+)`/g)].map((match) => match[1]!);
      const base = name === 'RelayBusError';
      const want = base || code === undefined ? [] : [code];
      if (named.join() !== want.join())
        problems.push(
          `${ERRORS}:${section.line} "## ${name}" names code ${named.join(', ') || '(none)'}; ${name} has ${want.join() || 'none'}`,
        );
    }
    assert.deepEqual(problems, [], problems.join('\n'));
  });

  it('every code of RELAYBUS_ERROR_CODES is documented, and the page names no other', async () => {
    const text = docPage(ERRORS).text;
    const named = new Set([...text.matchAll(/`(RELAYBUS_[A-Z_]+)`/g)].map((match) => match[1]!));
    assertSame(RELAYBUS_ERROR_CODES, named, ERRORS, 'RELAYBUS_ERROR_CODES (src/core/errors.ts)');
    const codes = new Set([...(await errorClasses()).values()].map((c) => c.code));
    const classless = RELAYBUS_ERROR_CODES.filter((code) => !codes.has(code));
    assert.deepEqual(classless, [], 'codes that no exported error class carries');
  });
});

describe('docs/reference/lifecycle-events.md documents every lifecycle event and its fields, once', () => {
  const all = sections(EVENTS);

  for (const [owner, events] of [
    ['bus.lifecycle', BUS_EVENTS],
    ['inbox.lifecycle', INBOX_EVENTS],
  ] as const) {
    it(`## ${owner} has a ### section for each event, with a table of its fields`, () => {
      const section = all.find((candidate) => candidate.level === 2 && candidate.heading === owner);
      assert.ok(section, `${EVENTS} has a "## ${owner}" section`);
      const start = all.indexOf(section);
      const end = all.findIndex((candidate, index) => index > start && candidate.level === 2);
      const documented = all.slice(start + 1, end < 0 ? undefined : end);
      assertSame(
        Object.keys(events),
        documented.map((event) => event.heading),
        `${EVENTS} "## ${owner}" (its ### headings)`,
        `${owner === 'bus.lifecycle' ? 'RelayBusEventMap' : 'InboxEventMap'}`,
      );
      for (const event of documented) {
        const fields = (events as Record<string, Record<string, true>>)[event.heading];
        if (fields === undefined) continue;
        assertSame(
          Object.keys(fields),
          event.rows.map((row) => row.name),
          `${EVENTS}:${event.line} "### ${event.heading}"`,
          `the payload of ${owner} '${event.heading}'`,
        );
      }
    });
  }

  it('## The delivery field lists the fields of DeliveryInfo', () => {
    const section = all.find((candidate) => candidate.heading === 'The delivery field');
    assert.ok(section, `${EVENTS} has a "## The delivery field" section`);
    assertSame(
      DELIVERY_FIELDS,
      section.rows.map((row) => row.name),
      `${EVENTS}:${section.line}`,
      'DeliveryInfo',
    );
  });
});

// A different docs root reads that copy's pages; the code is always this repository's.
if (DOCS_ROOT !== REPO_ROOT) console.log(`reading the reference pages of ${DOCS_ROOT}`);
