/**
 * `relaybus upgrade` and `relaybus setup` on a relaybus 0.1 schema, run in process against real
 * Postgres: the dry run prints the plan and the rows to convert and changes nothing; both refuse
 * while 0.1 workers hold leases (saying to stop them, exit 1); the upgrade prints progress on
 * stderr and what it did; afterwards the plan has nothing left to do. A newer schema is refused.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import type { CliContext, OutputStream } from '../../src/cli/command.js';
import { runCli } from '../../src/cli/main.js';
import { loadMigrations } from '../../src/postgres/schema-sql.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { rowLeaseLayout, seedRowLease } from '../support/upgrades.js';

const found = await findPostgres();
const url = 'url' in found ? found.url : '';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function cli(args: readonly string[]): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const stream = (write: (chunk: string) => void): OutputStream => ({
    write: (chunk: string) => {
      write(chunk);
      return true;
    },
    isTTY: false,
  });
  const context: Omit<CliContext, 'verbose'> = {
    stdout: stream((chunk) => {
      stdout += chunk;
    }),
    stderr: stream((chunk) => {
      stderr += chunk;
    }),
    env: { DATABASE_URL: url },
    cwd: process.cwd(),
  };
  const code = await runCli(args, context);
  return { code, stdout, stderr };
}

describe('relaybus upgrade and relaybus setup on a relaybus 0.1 schema (real Postgres)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  const schemas: string[] = [];
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  const columns = async (schema: string) =>
    (
      await admin.query<{ c: string }>(
        `SELECT table_name || '.' || column_name AS c FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1`,
        [schema],
      )
    ).rows.map((r) => r.c);

  it('dry run, refusal while leased, upgrade with progress, then nothing left to do', { timeout: 60_000 }, async () => {
    const schema = uniqueSchemaName('cli_upgrade');
    schemas.push(schema);
    await admin.query(rowLeaseLayout(schema));
    await seedRowLease(admin, schema, 600);
    const {
      rows: [counts],
    } = await admin.query<{ all: number; processing: number; completed: number }>(`SELECT count(*)::int AS all,
      count(*) FILTER (WHERE status = 'processing')::int AS processing, count(*) FILTER (WHERE status = 'completed')::int AS completed
      FROM "${schema}".relaybus_deliveries`);
    const layout = await columns(schema);
    const n = (value: number) => value.toLocaleString('en-US');

    const dry = await cli(['upgrade', '--dry-run', '--schema', schema, '--batch-size', '100']);
    assert.equal(dry.code, 0, dry.stderr);
    assert.match(dry.stdout, new RegExp(`schema "${schema}" on .+: the row-lease layout of relaybus 0\\.1`));
    assert.match(
      dry.stdout,
      new RegExp(
        `${n(counts!.all)} deliveries \\([\\d,]+ pending, ${n(counts!.processing)} processing of which 1 on their last attempt, ${n(counts!.completed)} completed, [\\d,]+ dead\\), ${n(counts!.all)} to convert`,
      ),
    );
    assert.match(dry.stdout, /convert [\d,]+ of [\d,]+ deliveries in batches of 100/);
    assert.match(
      dry.stdout,
      new RegExp(
        `of the ${n(counts!.processing)} deliveries in flight, ${n(counts!.processing - 1)} go back to pending \\(attempts kept\\) and 1 on their last attempt become dead letters`,
      ),
    );
    assert.match(dry.stdout, /apply migrations? 0001_/);
    assert.match(dry.stdout, /dry run: nothing was changed\n$/);
    assert.deepEqual(await columns(schema), layout, 'the dry run changed nothing');

    const leased =
      await admin.query(`UPDATE "${schema}".relaybus_deliveries SET lease_expires_at = now() + interval '1 minute'
      WHERE id = (SELECT min(id) FROM "${schema}".relaybus_deliveries WHERE status = 'processing') RETURNING id`);
    assert.equal(leased.rowCount, 1);
    for (const args of [['upgrade'], ['upgrade', '--dry-run'], ['setup']]) {
      const refused = await cli([...args, '--schema', schema]);
      assert.equal(refused.code, 1, `${args.join(' ')}: ${refused.stdout}`);
      assert.match(
        refused.stderr,
        /^relaybus: (refused: )?Schema ".+" has the layout of relaybus 0\.1 and its workers hold leases on 1 delivery .*stop every relaybus 0\.1 worker first/,
      );
    }
    assert.deepEqual(await columns(schema), layout, 'the refusals changed nothing');
    await admin.query(
      `UPDATE "${schema}".relaybus_deliveries SET lease_expires_at = now() - interval '1 second' WHERE id = $1`,
      [leased.rows[0].id],
    );

    const upgraded = await cli(['upgrade', '--schema', schema, '--batch-size', '100']);
    assert.equal(upgraded.code, 0, upgraded.stderr);
    assert.match(upgraded.stderr, /converting relaybus 0\.1 deliveries \[#+\.*\] \d+\/\d+/);
    assert.match(upgraded.stderr, /final step/);
    assert.match(
      upgraded.stdout,
      new RegExp(
        `upgraded from the relaybus 0\\.1 layout: ${n(counts!.all)} deliveries converted \\(${n(counts!.completed)} completed ones moved .*applied ${loadMigrations()
          .map((m) => m.name)
          .join(', ')}`,
      ),
    );

    assert.match(
      upgraded.stdout,
      new RegExp(`${n(counts!.processing - 1)} in-flight ones back to pending, 1 on their last attempt now dead`),
      'the upgrade did what the dry run said',
    );

    const setup = await cli(['setup', '--schema', schema]);
    assert.equal(setup.code, 0, setup.stderr);
    assert.match(setup.stdout, new RegExp(`^relaybus: schema "${schema}" on .+ is set up \\(\\d+ ms\\)\\n$`));
    const after = await cli(['upgrade', '--dry-run', '--schema', schema]);
    assert.match(
      after.stdout,
      new RegExp(`relaybus tables at ${loadMigrations().at(-1)!.name}\\nplan:\\n {2}1\\. nothing to migrate`),
    );
  });

  it('a 0.1 schema without events.key: the dry run and the upgrade refuse (exit 1), naming the column, changing nothing', async () => {
    const schema = uniqueSchemaName('cli_nokey');
    schemas.push(schema);
    await admin.query(rowLeaseLayout(schema));
    await seedRowLease(admin, schema, 50);
    await admin.query(`ALTER TABLE "${schema}".relaybus_events DROP COLUMN key`);
    const layout = await columns(schema);
    for (const args of [['upgrade', '--dry-run'], ['upgrade'], ['setup']]) {
      const refused = await cli([...args, '--schema', schema]);
      assert.equal(refused.code, 1, `${args.join(' ')}: ${refused.stdout}`);
      assert.match(
        refused.stderr,
        /^relaybus: Schema ".+" has the layout of relaybus 0\.1 .*column relaybus_events\.key \(text\) is missing\. The upgrade changed nothing/,
      );
    }
    assert.deepEqual(await columns(schema), layout, 'nothing changed');
  });

  it('refuses a schema of a newer relaybus, naming its versions', async () => {
    const schema = uniqueSchemaName('cli_newer');
    schemas.push(schema);
    assert.equal((await cli(['setup', '--schema', schema])).code, 0);
    await admin.query(`INSERT INTO "${schema}".relaybus_migrations (name) VALUES ('9999_later')`);
    for (const args of [['setup'], ['upgrade'], ['upgrade', '--dry-run']]) {
      const refused = await cli([...args, '--schema', schema]);
      assert.equal(refused.code, 1);
      assert.match(
        refused.stderr,
        /set up by a newer relaybus \(migration 9999_later; this version knows up to .*never downgrades/,
      );
    }
  });
});
