/**
 * README.md cannot drift from the code:
 *
 * - every ```ts block is typechecked against the sources (`relaybus`, `relaybus/postgres`, ... are
 *   mapped to src/ and schema/ by tsconfig `paths`), with the preludes its marker names, in a
 *   git-ignored folder under test/docs/.snippets/;
 * - every `relaybus` subcommand and long flag the README names (shell and Dockerfile blocks, inline
 *   code, the worker's flag table) is listed by `relaybus <command> --help` of the built bin;
 * - the quick start runs as written, in order, against Postgres, in a database of its own (the
 *   README's code uses the default `relaybus` schema, so a database is what keeps it apart): its
 *   files are saved, `relaybus setup` runs, the publishing script commits, and a worker drains.
 *
 * See test/docs/markdown.ts for the `<!-- snippet: ... -->` markers.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { BIN, REPO, runCli, startCli, tempDir, useBuiltCli, type CliResult } from '../cli/support.js';
import { findPostgres } from '../support/databases.js';
import {
  declaredFlags,
  invocationInDockerfile,
  invocationInSpan,
  invocationsInShell,
  type Invocation,
} from './commands.js';
import { parseReadme, type CodeBlock } from './markdown.js';
import { PRELUDES } from './preludes.js';
import { quickStartSteps } from './quick-start.js';

const execFileAsync = promisify(execFile);
const README = process.env.RELAYBUS_README ?? join(REPO, 'README.md'); // another file: to see this test fail on a broken copy
const parts = parseReadme(readFileSync(README, 'utf8'));
const QUICK_START = 'Quick start in your project';
const SHELL = new Set(['sh', 'bash', 'shell']);

useBuiltCli();

describe('README.md markers', () => {
  it('every <!-- snippet: ... --> marker is well-formed and applies to a code block or table', () => {
    assert.deepEqual(parts.problems, []);
  });

  it('every ts block is checked, or skipped with a reason; its preludes exist; its file name is unique', () => {
    const names = new Set<string>();
    for (const block of parts.blocks.filter((b) => b.lang === 'typescript' || b.lang === 'tsx')) {
      assert.fail(`README.md:${block.line}: write \`\`\`ts (the test checks ts blocks), not ${block.lang}`);
    }
    for (const block of tsBlocks()) {
      for (const name of block.marker?.preludes ?? []) {
        assert.ok(
          PRELUDES[name] !== undefined,
          `README.md:${block.line}: unknown prelude "${name}" (test/docs/preludes.ts has ${Object.keys(PRELUDES).join(', ')})`,
        );
      }
      const file = fileOf(block);
      assert.match(file, /^[\w.-]+\.ts$/, `README.md:${block.line}: file= must be a plain .ts file name`);
      assert.ok(!names.has(file), `README.md:${block.line}: file ${file} is written by two blocks`);
      names.add(file);
    }
    assert.ok(
      tsBlocks().some((block) => block.marker?.skip === undefined),
      'the README has ts blocks to check',
    );
  });
});

function tsBlocks(): CodeBlock[] {
  return parts.blocks.filter((block) => block.lang === 'ts');
}

function fileOf(block: CodeBlock): string {
  return block.marker?.file ?? `readme-line-${block.line}.ts`;
}

describe('README.md ts blocks typecheck against the sources', () => {
  const checked = tsBlocks().filter((block) => block.marker?.skip === undefined);
  const dir = join(REPO, 'test/docs/.snippets', `${process.pid}-${Date.now()}`);
  /** Per snippet file: its diagnostics, with README line numbers. */
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
      writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n'); // ES modules: top-level await, as the README says
      const offsets = new Map<string, { block: CodeBlock; first: number; preludeLines: number }>();
      for (const block of checked) {
        const prelude = (block.marker?.preludes ?? []).map((name) => PRELUDES[name] ?? '').join('\n');
        const header = `// README.md line ${block.line + 1}, generated by test/docs/readme.test.ts`;
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
          if (at === undefined) continue; // a source file someone is editing: not the README's business
          const fileLine = Number(match[2]);
          const where =
            fileLine >= at.first
              ? `README.md:${at.block.line + 1 + fileLine - at.first}:${match[3]}`
              : `prelude ${at.block.marker?.preludes.join(',')} of README.md:${at.block.line} (line ${fileLine - 1})`;
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
    it(`README.md:${block.line} (${fileOf(block)}${label}) typechecks`, () => {
      assert.deepEqual(diagnostics.get(fileOf(block)) ?? [], []);
    });
  }
});

/** Every `relaybus` invocation the README names, by subcommand: the flags it names and where. */
function namedInvocations(): Map<string, { words: readonly string[]; flags: Map<string, number[]>; lines: number[] }> {
  const all = new Map<string, { words: readonly string[]; flags: Map<string, number[]>; lines: number[] }>();
  const add = (invocation: Invocation, line: number): void => {
    const key = invocation.words.join(' ');
    const entry = all.get(key) ?? { words: invocation.words, flags: new Map<string, number[]>(), lines: [] };
    entry.lines.push(line);
    for (const flag of invocation.flags) entry.flags.set(flag, [...(entry.flags.get(flag) ?? []), line]);
    all.set(key, entry);
  };
  for (const block of parts.blocks) {
    block.code.split('\n').forEach((text, index) => {
      const line = block.line + 1 + index;
      if (SHELL.has(block.lang)) invocationsInShell(text).forEach((invocation) => add(invocation, line));
      if (block.lang === 'dockerfile') {
        const invocation = invocationInDockerfile(text);
        if (invocation) add(invocation, line);
      }
    });
  }
  for (const span of parts.inline) {
    const invocation = invocationInSpan(span.text);
    if (invocation) add(invocation, span.line);
  }
  for (const table of parts.tables) {
    const words = table.command.split(' ');
    for (const { flag, line } of table.flags) add({ words, flags: [flag], args: [...words, flag] }, line);
  }
  return all;
}

describe('README.md names only relaybus commands and flags that exist', () => {
  const named = namedInvocations();
  const help = new Map<string, Promise<CliResult>>();

  it('names the commands of the quick start and the worker flags', () => {
    for (const command of ['setup', 'worker', 'sql'])
      assert.ok(named.has(command), `the README names relaybus ${command}`);
    assert.ok(
      parts.tables.some((table) => table.command === 'worker' && table.flags.length > 0),
      'a flags=worker table',
    );
  });

  for (const [command, { words, flags, lines }] of named) {
    it(`relaybus ${command} (README.md:${[...new Set(lines)].join(',')}) exists with ${flags.size === 0 ? 'no flags named' : [...flags.keys()].join(' ')}`, async () => {
      if (!help.has(command)) help.set(command, runCli([...words, '--help']));
      const result = await help.get(command)!;
      assert.equal(result.code, 0, `relaybus ${command} --help failed (no such command?):\n${result.stderr}`);
      const declared = declaredFlags(result.stdout);
      const missing = [...flags]
        .filter(([flag]) => !declared.has(flag))
        .map(([flag, at]) => `${flag} (README.md:${at.join(',')})`);
      assert.deepEqual(missing, [], `relaybus ${command} --help lists ${[...declared].join(' ')}`);
    });
  }
});

/** What the quick start says the worker prints: "... prints `<text>`". */
function printedClaims(): string[] {
  const text = readFileSync(README, 'utf8');
  const start = text.indexOf(`## ${QUICK_START}`);
  const section = text.slice(start, text.indexOf('\n## ', start + 1));
  return [...section.matchAll(/prints `([^`]+)`/g)].map((match) => match[1]!);
}

const found = await findPostgres();

describe('README.md quick start, run as written against Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const database = `relaybus_readme_${process.pid}_${Date.now()}`;
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  let target = '';

  before(async () => {
    await admin.query(`CREATE DATABASE "${database}"`);
    const at = new URL(url);
    at.pathname = `/${database}`;
    target = at.toString();
    // The README publishes into "an orders (id, customer_id) table of your application".
    const app = new pg.Client({ connectionString: target });
    await app.connect();
    await app.query('CREATE TABLE orders (id text PRIMARY KEY, customer_id text NOT NULL)');
    await app.end();
  });

  after(async () => {
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.end();
  });

  it('saves the files, runs relaybus setup, publishes, and a worker drains the delivery, in the README order', {
    timeout: 120_000,
  }, async () => {
    const steps = quickStartSteps(parts.blocks.filter((block) => block.section === QUICK_START));
    assert.ok(
      steps.some((step) => step.kind === 'relaybus' && step.invocation.words[0] === 'worker'),
      'the quick start runs a worker',
    );
    // A fresh project as `npm init -y` makes it, with relaybus, pg and tsx linked from this repository.
    const project = tempDir('readme-quick-start');
    writeFileSync(
      join(project, 'package.json'),
      `${JSON.stringify({ name: 'app', version: '1.0.0', type: 'commonjs' }, null, 2)}\n`,
    );
    mkdirSync(join(project, 'node_modules/.bin'), { recursive: true });
    symlinkSync(REPO, join(project, 'node_modules/relaybus'), 'dir');
    for (const name of ['pg', 'tsx'])
      symlinkSync(join(REPO, 'node_modules', name), join(project, 'node_modules', name), 'dir');
    symlinkSync(join(REPO, 'node_modules/tsx/dist/cli.mjs'), join(project, 'node_modules/.bin/tsx'));
    symlinkSync(BIN, join(project, 'node_modules/.bin/relaybus'));

    const clean = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')),
    );
    // DATABASE_URL is always this test's database, whatever the README exports: never the shared one.
    const env: Record<string, string | undefined> = {
      ...clean,
      NPM_CONFIG_OFFLINE: 'true',
      NO_UPDATE_NOTIFIER: '1',
      DATABASE_URL: target,
    };
    const db = new pg.Pool({ connectionString: target, max: 1 });
    // The drop of the worker's connections below (and the database's forced drop after) may reach this pool's own idle
    // connection too: a dropped idle connection is an 'error' event of the pool, harmless here.
    db.on('error', () => {});
    try {
      for (const step of steps) {
        const at = `README.md:${step.line}`;
        if (step.kind === 'file') writeFileSync(join(project, step.name), step.code);
        else if (step.kind === 'env') env[step.name] = step.name === 'DATABASE_URL' ? target : step.value;
        else if (step.kind === 'install')
          continue; // relaybus, pg and tsx are linked above
        else if (step.kind === 'shell') {
          await execFileAsync('/bin/sh', ['-c', step.text], { cwd: project, env, timeout: 60_000 }).catch(
            (error: { stdout?: string; stderr?: string }) => {
              assert.fail(`${at}: \`${step.text}\` failed:\n${error.stdout ?? ''}${error.stderr ?? ''}`);
            },
          );
        } else if (step.invocation.words[0] !== 'worker') {
          const result = await runCli(step.invocation.args, { cwd: project, env });
          assert.equal(
            result.code,
            0,
            `${at}: \`${step.text}\` exited ${result.code}:\n${result.stdout}${result.stderr}`,
          );
        } else {
          // The bin itself, not npx: the README says why (npx does not wait for the worker on SIGTERM).
          const worker = startCli(step.invocation.args, { cwd: project, env });
          const deadline = Date.now() + 30_000;
          for (;;) {
            const { rows } = await db.query<{ events: number; deliveries: number }>(
              'SELECT (SELECT count(*)::int FROM relaybus.relaybus_events) AS events, (SELECT count(*)::int FROM relaybus.relaybus_deliveries) AS deliveries',
            );
            if (rows[0]!.events > 0 && rows[0]!.deliveries === 0) break;
            const output = worker.output();
            if (Date.now() > deadline || worker.child.exitCode !== null) {
              worker.child.kill('SIGKILL');
              assert.fail(
                `${at}: the worker did not drain (${JSON.stringify(rows[0])}):\n${output.stdout}${output.stderr}`,
              );
            }
            await sleep(100);
          }
          // The server drops the worker's connections (a failover, an idle timeout): the quick start's
          // pool error listener keeps the process alive, and the worker still stops gracefully.
          const dropped = await db.query(
            'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
            [database],
          );
          assert.ok((dropped.rowCount ?? 0) > 0, 'the worker had connections to drop');
          await sleep(500);
          assert.equal(
            worker.child.exitCode,
            null,
            `${at}: the worker died when its connections were dropped:\n${worker.output().stderr}`,
          );
          worker.child.kill('SIGTERM');
          const result = await worker.exited;
          assert.equal(
            result.code,
            0,
            `${at}: the worker stopped with ${result.code ?? result.signal}:\n${result.stdout}${result.stderr}`,
          );
          for (const claim of printedClaims())
            assert.ok(
              result.stdout.includes(claim),
              `the README says the worker prints "${claim}"; it printed:\n${result.stdout}`,
            );
        }
      }
      const { rows } = await db.query<{ handlers: string[] }>('SELECT handlers FROM relaybus.relaybus_events');
      assert.equal(rows.length, 1, 'the quick start published one event');
      assert.ok(rows[0]!.handlers.length > 0, 'with its handlers');
    } finally {
      await db.end();
    }
  });
});
