/**
 * The documentation (README.md and the guide under docs/, test/docs/doc-set.ts) cannot drift from the code:
 *
 * - every ```ts block of every page is typechecked against the sources (`relaybus`, `relaybus/postgres`, ... are
 *   mapped to src/ and schema/ by tsconfig `paths`), with the preludes its marker names, in a git-ignored folder
 *   under test/docs/.snippets/ (one folder for all pages: a page's block may import a file another page saves);
 * - every `relaybus` subcommand and long flag a page names (shell and Dockerfile blocks, inline code, flag tables)
 *   is listed by `relaybus <command> --help` of the built bin.
 *
 * The flows themselves (the quick start, Kysely, SQL and triggers, ...) are followed as a user does in
 * test/flows/, with the packed package in a new project.
 *
 * See test/docs/markdown.ts for the `<!-- snippet: ... -->` markers.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { REPO, runCli, useBuiltCli, type CliResult } from '../cli/support.js';
import {
  declaredFlags,
  invocationInDockerfile,
  invocationInSpan,
  invocationsInShell,
  type Invocation,
} from './commands.js';
import { allBlocks, docPage, docPages } from './doc-set.js';
import type { CodeBlock } from './markdown.js';
import { PRELUDES } from './preludes.js';
import { quickStartSteps } from './quick-start.js';

const execFileAsync = promisify(execFile);
const QUICK_START = 'Quick start in your project';
const SHELL = new Set(['sh', 'bash', 'shell']);

useBuiltCli();

describe('documentation markers', () => {
  it('every <!-- snippet: ... --> marker is well-formed and applies to a code block or table', () => {
    assert.deepEqual(
      docPages().flatMap((page) => page.parts.problems),
      [],
    );
  });

  it('the quick start is made of steps test/flows/quick-start.test.ts knows how to run', () => {
    const steps = quickStartSteps(docPage('README.md').parts.blocks.filter((block) => block.section === QUICK_START));
    for (const kind of ['build', 'install', 'file', 'relaybus'])
      assert.ok(
        steps.some((step) => step.kind === kind),
        `the quick start has a ${kind} step`,
      );
  });

  it('every ts block is checked, or skipped with a reason; its preludes exist; its file name is unique', () => {
    const names = new Set<string>();
    for (const block of allBlocks().filter((b) => b.lang === 'typescript' || b.lang === 'tsx')) {
      assert.fail(`${block.page}:${block.line}: write \`\`\`ts (the test checks ts blocks), not ${block.lang}`);
    }
    for (const block of tsBlocks()) {
      for (const name of block.marker?.preludes ?? []) {
        assert.ok(
          PRELUDES[name] !== undefined,
          `${block.page}:${block.line}: unknown prelude "${name}" (test/docs/preludes.ts has ${Object.keys(PRELUDES).join(', ')})`,
        );
      }
      const file = fileOf(block);
      assert.match(file, /^[\w.-]+\.ts$/, `${block.page}:${block.line}: file= must be a plain .ts file name`);
      assert.ok(!names.has(file), `${block.page}:${block.line}: file ${file} is written by two blocks`);
      names.add(file);
    }
    assert.ok(
      tsBlocks().some((block) => block.marker?.skip === undefined),
      'the documentation has ts blocks to check',
    );
  });
});

function tsBlocks(): CodeBlock[] {
  return allBlocks().filter((block) => block.lang === 'ts');
}

/** The snippet file a block is written to: its file= name, else one made of its page and line. */
function fileOf(block: CodeBlock): string {
  return block.marker?.file ?? `${block.page.replace(/\.md$/, '').replace(/[^\w]+/g, '-')}-line-${block.line}.ts`;
}

describe('the ts blocks of the documentation typecheck against the sources', () => {
  const checked = tsBlocks().filter((block) => block.marker?.skip === undefined);
  const dir = join(REPO, 'test/docs/.snippets', `${process.pid}-${Date.now()}`);
  /** Per snippet file: its diagnostics, with page line numbers. */
  const diagnostics = new Map<string, string[]>();
  let compilerFailure = '';

  before(
    async () => {
      mkdirSync(dir, { recursive: true });
      const up = relative(dir, REPO);
      const paths = {
        relaybus: ['src/index.ts'],
        'relaybus/postgres': ['src/postgres/index.ts'],
        'relaybus/schema': ['schema/index.ts'],
        'relaybus/kysely': ['src/postgres/drivers/kysely-driver.ts'],
        'relaybus/drizzle': ['src/postgres/drivers/drizzle-driver.ts'],
        'relaybus/opentelemetry': ['src/telemetry/opentelemetry.ts'],
        'relaybus/amqp': ['src/amqp/index.ts'],
        'relaybus/nats': ['src/nats/index.ts'],
        'relaybus/kafka': ['src/kafka/index.ts'],
      };
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify(
          {
            extends: join(up, 'tsconfig.json'),
            // Snippets are illustrations: a prelude value they do not use is fine.
            compilerOptions: {
              noUnusedLocals: false,
              paths: Object.fromEntries(Object.entries(paths).map(([name, [to]]) => [name, [join(up, to!)]])),
            },
            include: ['*.ts'],
          },
          null,
          2,
        ),
      );
      writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n'); // ES modules: top-level await, as the docs say
      const offsets = new Map<string, { block: CodeBlock; first: number; preludeLines: number }>();
      for (const block of checked) {
        const prelude = (block.marker?.preludes ?? []).map((name) => PRELUDES[name] ?? '').join('\n');
        const header = `// ${block.page} line ${block.line + 1}, generated by test/docs/docs.test.ts`;
        const preludeLines = prelude === '' ? 0 : prelude.split('\n').length;
        writeFileSync(
          join(dir, fileOf(block)),
          `${header}\n${prelude === '' ? '' : `${prelude}\n`}${block.code}\nexport {};\n`,
        );
        offsets.set(fileOf(block), { block, first: 2 + preludeLines, preludeLines });
      }
      let output = '';
      try {
        await execFileAsync(
          process.execPath,
          [join(REPO, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json', '--pretty', 'false'],
          {
            cwd: dir,
            maxBuffer: 16 * 1024 * 1024,
            timeout: 120_000,
          },
        );
      } catch (error) {
        const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
        output = `${stdout}${stderr}`;
        if (output.trim() === '') compilerFailure = `tsc failed without output: ${(error as Error).message}`;
      }
      // Lines "<file>(<line>,<col>): error TS....: message", then indented continuation lines.
      let current: string[] | undefined;
      for (const line of output.split('\n')) {
        const match = /^([^(\s]+)\((\d+),(\d+)\): (error .*)$/.exec(line);
        if (match) {
          const at = offsets.get(match[1]!);
          current = undefined;
          if (at === undefined) continue; // a source file someone is editing: not the documentation's business
          const fileLine = Number(match[2]);
          const where =
            fileLine >= at.first
              ? `${at.block.page}:${at.block.line + 1 + fileLine - at.first}:${match[3]}`
              : `prelude ${at.block.marker?.preludes.join(',')} of ${at.block.page}:${at.block.line} (line ${fileLine - 1})`;
          current = diagnostics.get(match[1]!) ?? [];
          current.push(`${where}: ${match[4]}`);
          diagnostics.set(match[1]!, current);
        } else if (current !== undefined && /^\s/.test(line) && line.trim() !== '') {
          current[current.length - 1] += `\n  ${line.trim()}`;
        } else if (/^error TS/.test(line) || /^tsconfig\.json/.test(line)) {
          compilerFailure += `${line}\n`;
        }
      }
    },
    { timeout: 150_000 },
  );

  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the compiler ran on the snippets', () => assert.equal(compilerFailure, ''));

  for (const block of checked) {
    const label = block.marker?.preludes.length ? `, prelude ${block.marker.preludes.join(',')}` : '';
    it(`${block.page}:${block.line} (${fileOf(block)}${label}) typechecks`, () => {
      assert.deepEqual(diagnostics.get(fileOf(block)) ?? [], []);
    });
  }
});

/** Every `relaybus` invocation the documentation names, by subcommand: the flags it names and where (`page:line`). */
function namedInvocations(): Map<string, { words: readonly string[]; flags: Map<string, string[]>; lines: string[] }> {
  const all = new Map<string, { words: readonly string[]; flags: Map<string, string[]>; lines: string[] }>();
  const add = (invocation: Invocation, line: string): void => {
    const key = invocation.words.join(' ');
    const entry = all.get(key) ?? { words: invocation.words, flags: new Map<string, string[]>(), lines: [] };
    entry.lines.push(line);
    for (const flag of invocation.flags) entry.flags.set(flag, [...(entry.flags.get(flag) ?? []), line]);
    all.set(key, entry);
  };
  for (const { path, parts } of docPages()) {
    for (const block of parts.blocks) {
      block.code.split('\n').forEach((text, index) => {
        const line = `${path}:${block.line + 1 + index}`;
        if (SHELL.has(block.lang)) invocationsInShell(text).forEach((invocation) => add(invocation, line));
        if (block.lang === 'dockerfile') {
          const invocation = invocationInDockerfile(text);
          if (invocation) add(invocation, line);
        }
      });
    }
    for (const span of parts.inline) {
      const invocation = invocationInSpan(span.text);
      if (invocation) add(invocation, `${path}:${span.line}`);
    }
    for (const table of parts.tables) {
      const words = table.command.split(' ');
      for (const { flag, line } of table.flags)
        add({ words, flags: [flag], args: [...words, flag] }, `${path}:${line}`);
    }
  }
  return all;
}

describe('the documentation names only relaybus commands and flags that exist', () => {
  const named = namedInvocations();
  const help = new Map<string, Promise<CliResult>>();

  it('names the commands of the quick start and the worker flags', () => {
    for (const command of ['setup', 'worker', 'sql'])
      assert.ok(named.has(command), `the documentation names relaybus ${command}`);
    assert.ok(
      docPages().some((page) =>
        page.parts.tables.some((table) => table.command === 'worker' && table.flags.length > 0),
      ),
      'a flags=worker table',
    );
  });

  for (const [command, { words, flags, lines }] of named) {
    it(`relaybus ${command} (${[...new Set(lines)].slice(0, 4).join(', ')}${lines.length > 4 ? ', ...' : ''}) exists with ${flags.size === 0 ? 'no flags named' : [...flags.keys()].join(' ')}`, async () => {
      if (!help.has(command)) help.set(command, runCli([...words, '--help']));
      const result = await help.get(command)!;
      assert.equal(result.code, 0, `relaybus ${command} --help failed (no such command?):\n${result.stderr}`);
      const declared = declaredFlags(result.stdout);
      const missing = [...flags]
        .filter(([flag]) => !declared.has(flag))
        .map(([flag, at]) => `${flag} (${at.join(', ')})`);
      assert.deepEqual(missing, [], `relaybus ${command} --help lists ${[...declared].join(' ')}`);
    });
  }
});
