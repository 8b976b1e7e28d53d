/**
 * The guide's "With drizzle-kit" section (docs/guide/migrations.md), followed as a user does, in a fresh project outside the
 * repository with relaybus installed from the packed tarball (and pg, drizzle-orm, drizzle-kit):
 * its ts blocks are written to the files their first line names (`// drizzle.config.ts`), then
 * its shell lines run in order (`<the generated file>` stands for the migration the `drizzle-kit
 * generate` before it made). The app's own tables are the test's (`src/db/schema.ts`: `orders`).
 *
 * Then the relaybus tables must be there with their 256 lanes, next to the app's, and a bus with
 * `setupStore: false` must publish inside a Drizzle transaction and deliver: on an empty database,
 * and on one where `relaybus setup` had already made the tables and held an event (which must
 * survive). `RELAYBUS_DOCS_ROOT=<folder>` runs the flow of another copy of the documentation.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { docPage } from '../docs/doc-set.js';
import { findPostgres } from '../support/databases.js';
import {
  FlowDatabases,
  freshProject,
  packedTarball,
  REPO_ROOT,
  removeWork,
  run,
  workDir,
} from '../support/packed-package.js';

/** The guide's page with the drizzle-kit flow, and its section (a `##` or `###` heading). */
const PAGE = 'docs/guide/migrations.md';
const HEADING = 'With drizzle-kit';
const GENERATED = '<the generated file>';

interface Flow {
  readonly files: readonly { readonly path: string; readonly code: string; readonly line: number }[];
  readonly commands: readonly { readonly text: string; readonly line: number }[];
}

/** The files and shell lines of the page's "With drizzle-kit" section, in order. */
function readFlow(): Flow {
  const { text, parts } = docPage(PAGE);
  const lines = text.split('\n');
  const start = lines.findIndex((line) => /^#{2,3} /.test(line) && line.replace(/^#+ /, '').trim() === HEADING) + 1;
  assert.ok(start > 0, `${PAGE} has a "${HEADING}" section`);
  // The section ends at the next heading outside a code block.
  let end = lines.length;
  let fenced = false;
  for (let index = start; index < lines.length; index += 1) {
    if (/^(`{3,}|~{3,})/.test(lines[index]!.trim())) fenced = !fenced;
    else if (!fenced && /^#{1,6}\s/.test(lines[index]!)) {
      end = index + 1;
      break;
    }
  }
  const blocks = parts.blocks.filter((block) => block.line > start && block.line < end);
  const files: { path: string; code: string; line: number }[] = [];
  const commands: { text: string; line: number }[] = [];
  for (const block of blocks) {
    if (block.lang === 'ts') {
      const named = /^\/\/ ([\w./-]+\.ts)\s*$/.exec(block.code.split('\n')[0]!);
      assert.ok(named, `${PAGE}:${block.line}: a ts block of "${HEADING}" names its file on its first line`);
      files.push({ path: named[1]!, code: `${block.code}\n`, line: block.line });
    } else if (['sh', 'bash', 'shell'].includes(block.lang)) {
      block.code.split('\n').forEach((raw, index) => {
        const command = raw.replace(/(^|\s)#.*$/, '').trim();
        if (command !== '') commands.push({ text: command, line: block.line + 1 + index });
      });
    } else {
      assert.fail(`${PAGE}:${block.line}: the drizzle-kit flow test does not know how to follow a ${block.lang} block`);
    }
  }
  assert.ok(
    files.some((file) => file.path === 'drizzle.config.ts'),
    `"${HEADING}" shows the drizzle.config.ts to write`,
  );
  assert.ok(commands.length > 0, `"${HEADING}" has shell commands`);
  return { files, commands };
}

const flow = readFlow();

/** The app's own tables: the user's, not the README's. */
const APP_SCHEMA = `import { pgTable, text } from 'drizzle-orm/pg-core';

export const orders = pgTable('orders', {
  id: text('id').primaryKey(),
  customerId: text('customer_id').notNull(),
});
`;

/**
 * `node check.mjs publish|deliver <id>`: a bus with setupStore: false publishes <id> inside a Drizzle
 * transaction; `deliver` then starts it until nothing is pending. Prints the ids its handler saw.
 */
const CHECK = `import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { createRelayBus, defineEvent, Type } from 'relaybus';
import { fromDrizzle } from 'relaybus/drizzle';
import { postgresStore } from 'relaybus/postgres';

const [mode, id] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
pool.on('error', () => {});
const db = drizzle({ client: pool });
const Ping = defineEvent('ping', Type.Object({ id: Type.String() }));
const bus = createRelayBus({
  store: postgresStore({ driver: fromDrizzle(db) }),
  events: [Ping],
  setupStore: false,
  dispatcher: { pollIntervalMs: 50 },
});
const seen = [];
bus.on(Ping, 'record', async (event) => {
  seen.push(event.id);
});
await db.transaction((tx) => bus.publish(tx, Ping, { id }, { key: 'k' }));
let left;
if (mode === 'deliver') {
  await bus.start();
  for (const deadline = Date.now() + 15_000; Date.now() < deadline; ) {
    left = await bus.store.statistics();
    if (left.pending + left.inFlight === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await bus.stop();
}
console.log(JSON.stringify({ seen: seen.sort(), pending: left?.pending, dead: left?.dead }));
await pool.end();
`;

function sqlFiles(project: string): Set<string> {
  try {
    return new Set(readdirSync(join(project, 'drizzle')).filter((name) => name.endsWith('.sql')));
  } catch {
    return new Set();
  }
}

const found = await findPostgres();

describe('README "With drizzle-kit", followed in a fresh project with the packed package', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const work = workDir('drizzle-kit');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  const project = join(work, 'app');

  before(async () => {
    await freshProject(project, await packedTarball(work), ['pg', 'drizzle-orm'], ['drizzle-kit']);
    mkdirSync(join(project, 'src/db'), { recursive: true });
    writeFileSync(join(project, 'src/db/schema.ts'), APP_SCHEMA);
    writeFileSync(join(project, 'check.mjs'), CHECK);
  });

  after(async () => {
    await databases.drop();
    removeWork(work);
  });

  /** The README's files, then its commands in order, against `url`; a fresh drizzle/ folder. */
  async function follow(url: string): Promise<void> {
    rmSync(join(project, 'drizzle'), { recursive: true, force: true });
    for (const file of flow.files) {
      mkdirSync(dirname(join(project, file.path)), { recursive: true });
      writeFileSync(join(project, file.path), file.code);
    }
    let generated: string | undefined;
    for (const { text, line } of flow.commands) {
      let command = text;
      if (command.includes(GENERATED)) {
        assert.ok(generated, `${PAGE}:${line}: ${GENERATED} before any drizzle-kit generate made a file`);
        command = command.replaceAll(GENERATED, generated);
      }
      assert.doesNotMatch(command, /<[^>]*>/, `${PAGE}:${line}: a placeholder the test cannot fill: ${text}`);
      const before = sqlFiles(project);
      try {
        await run('sh', ['-c', command], project, { DATABASE_URL: url });
      } catch (error) {
        throw new Error(`${PAGE}:${line}: ${text}\n${(error as Error).message}`, { cause: error });
      }
      const made = [...sqlFiles(project)].filter((name) => !before.has(name));
      if (made.length > 0)
        generated = made
          .sort()
          .at(-1)!
          .replace(/\.sql$/, '');
    }
  }

  async function check(url: string, mode: 'publish' | 'deliver', id: string) {
    const output = await run('node', ['check.mjs', mode, id], project, { DATABASE_URL: url });
    return JSON.parse(output.trim().split('\n').at(-1)!) as { seen: string[]; pending?: number; dead?: number };
  }

  async function tables(url: string) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ lanes: number; orders: string | null; migrations: string[] }>(
        `SELECT (SELECT count(*)::int FROM relaybus.relaybus_lanes WHERE epoch >= 0) AS lanes,
                to_regclass('public.orders')::text AS orders,
                (SELECT array_agg(name ORDER BY name) FROM relaybus.relaybus_migrations) AS migrations`,
      );
      return rows[0]!;
    } catch (error) {
      assert.fail(`the relaybus tables are missing after the README's flow: ${(error as Error).message}`);
    } finally {
      await client.end();
    }
  }

  const journal = JSON.parse(readFileSync(join(REPO_ROOT, 'schema/migrations/meta/_journal.json'), 'utf8')) as {
    entries: { tag: string }[];
  };
  const MIGRATIONS = journal.entries.map((entry) => entry.tag).sort();

  it('on an empty database: the app tables and the relaybus tables (256 lanes); a bus with setupStore: false publishes and delivers', async () => {
    const url = await databases.create('drizzlekit');
    await follow(url);
    assert.deepEqual(await tables(url), { lanes: 256, orders: 'orders', migrations: MIGRATIONS });
    assert.deepEqual(await check(url, 'deliver', 'after-migrate'), { seen: ['after-migrate'], pending: 0, dead: 0 });
  });

  it('on a database where relaybus setup already ran: the same, and the event published before is still delivered', async () => {
    const url = await databases.create('drizzlekitsetup');
    await run('npx', ['relaybus', 'setup'], project, { DATABASE_URL: url });
    assert.deepEqual((await check(url, 'publish', 'before-migrate')).seen, []);
    await follow(url);
    assert.deepEqual(await tables(url), { lanes: 256, orders: 'orders', migrations: MIGRATIONS });
    assert.deepEqual(await check(url, 'deliver', 'after-migrate'), {
      seen: ['after-migrate', 'before-migrate'],
      pending: 0,
      dead: 0,
    });
  });
});
