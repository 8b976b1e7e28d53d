/**
 * The 0.1 upgrade checks what it needs before its first change, and says where it stopped when a
 * later step fails anyway (real Postgres):
 *
 * - a 0.1 layout that lacks a column the upgrade reads (events.key), has a counter renamed
 *   (deliveries.attempts) or a column of another type (events.payload json): the dry run and the
 *   real run both refuse with an `UpgradePreconditionError` naming it (the one-script form of
 *   createPostgresSchemaSql too), and the schema is unchanged; once the column is back, the same
 *   upgrade goes through;
 * - rows the upgraded layout's checks refuse (max_attempts 0): refused alike, before any change;
 * - a column dropped after the batches committed (the failure once reported as a bare SQLSTATE
 *   42703 at the last step): the final step refuses, naming the column and the steps that committed;
 * - a final step that fails on the data (a duplicate (event, handler) pair the new unique index
 *   refuses): an `UpgradeInterruptedError` says which steps committed, that the final step rolled
 *   back, that the schema still has the 0.1 layout, and how to resume; running it again after the
 *   cause is removed finishes it.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { SchemaMismatchError, StoreUnavailableError } from '../../src/core/errors.js';
import { createPostgresSchemaSql, fromPg } from '../../src/postgres/index.js';
import { loadMigrations } from '../../src/postgres/schema-sql.js';
import { setupPostgres } from '../../src/postgres/setup.js';
import { loadStatements } from '../../src/postgres/statements.js';
import { UpgradeInterruptedError } from '../../src/postgres/upgrade/interrupted.js';
import { planPostgresSetup } from '../../src/postgres/upgrade/plan.js';
import { UpgradePreconditionError } from '../../src/postgres/upgrade/preconditions.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { rowLeaseLayout, seedRowLease, snapshotRowLease } from '../support/upgrades.js';

const found = await findPostgres();
const url = 'url' in found ? found.url : '';
const versions = loadMigrations().map((m) => m.name);

/** A layout that differs from 0.1's, how to make it, what the refusal names, and how to put it back. */
const VARIANTS = [
  {
    label: 'events.key missing',
    change: (s: string) => `ALTER TABLE ${s}.relaybus_events DROP COLUMN key`,
    named: /column relaybus_events\.key \(text\) is missing/,
    repair: (s: string) => `ALTER TABLE ${s}.relaybus_events ADD COLUMN key text`,
  },
  {
    label: 'deliveries.attempts renamed',
    change: (s: string) => `ALTER TABLE ${s}.relaybus_deliveries RENAME COLUMN attempts TO attempt_count`,
    named: /column relaybus_deliveries\.attempts \(integer\) is missing/,
    repair: (s: string) => `ALTER TABLE ${s}.relaybus_deliveries RENAME COLUMN attempt_count TO attempts`,
  },
  {
    label: 'events.payload of type json',
    change: (s: string) => `ALTER TABLE ${s}.relaybus_events ALTER COLUMN payload TYPE json`,
    named: /column relaybus_events\.payload is json, expected jsonb/,
    repair: (s: string) => `ALTER TABLE ${s}.relaybus_events ALTER COLUMN payload TYPE jsonb`,
  },
  {
    label: 'a delivery with max_attempts 0',
    change: (s: string) =>
      `UPDATE ${s}.relaybus_deliveries SET max_attempts = 0 WHERE id = (SELECT min(id) FROM ${s}.relaybus_deliveries WHERE status = 'pending')`,
    named: /1 delivery not completed has attempts < 0 or max_attempts < 1/,
    repair: (s: string) => `UPDATE ${s}.relaybus_deliveries SET max_attempts = 3 WHERE max_attempts = 0`,
  },
] as const;

describe('the 0.1 upgrade checks its preconditions first and says where it stopped', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const admin = new pg.Pool({ connectionString: url, max: 3 });
  const schemas: string[] = [];
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  async function rowLeaseSchema(label: string, events: number): Promise<string> {
    const schema = uniqueSchemaName(label);
    schemas.push(schema);
    await admin.query(rowLeaseLayout(schema));
    await seedRowLease(admin, schema, events);
    return schema;
  }

  const hasMarker = async (schema: string) =>
    (
      await admin.query(
        `SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'lease_token' AND NOT attisdropped`,
        [`"${schema}".relaybus_deliveries`],
      )
    ).rowCount === 1;

  for (const variant of VARIANTS) {
    it(`${variant.label}: the dry run and the upgrade both refuse before any change, naming it`, async () => {
      const schema = await rowLeaseSchema('upgrade_pre', 60);
      await admin.query(variant.change(`"${schema}"`));
      const before = await snapshotRowLease(admin, schema);
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        const refused = (error: unknown) => {
          assert.ok(error instanceof UpgradePreconditionError, String(error));
          assert.ok(error instanceof SchemaMismatchError);
          assert.equal(error.retryable, false);
          assert.match(error.message, variant.named);
          assert.match(error.message, /changed nothing/);
          assert.ok(error.problems.some((problem) => variant.named.test(problem)));
          return true;
        };
        const plan = planPostgresSetup(fromPg(pool), schema, loadStatements(schema), { batchSize: 20 });
        if (variant.label.startsWith('a delivery')) {
          // The layout is right: the dry run plans, and refuses as the upgrade will.
          const { refusal } = await plan;
          assert.match(refusal ?? '', variant.named);
        } else {
          await assert.rejects(plan, refused);
          // The one-script form (relaybus sql) checks the same layout in plpgsql.
          await assert.rejects(pool.query(createPostgresSchemaSql({ schema })), (error: unknown) => {
            assert.match(String(error), /has the layout of relaybus 0\.1 .*but not everything the upgrade reads/);
            assert.match(String(error), variant.named);
            return true;
          });
        }
        await assert.rejects(setupPostgres(fromPg(pool), schema, loadStatements(schema), { batchSize: 20 }), refused);
        assert.deepEqual(await snapshotRowLease(admin, schema), before, 'the schema is unchanged');

        await admin.query(variant.repair(`"${schema}"`));
        const result = await setupPostgres(fromPg(pool), schema, loadStatements(schema), { batchSize: 20 });
        assert.deepEqual(result.applied, versions, 'with the layout repaired the same upgrade goes through');
      } finally {
        await pool.end();
      }
    });
  }

  it('a column dropped after the batches committed: the final step refuses, naming it and the steps that committed', async () => {
    const schema = await rowLeaseSchema('upgrade_late', 200);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      await assert.rejects(
        setupPostgres(fromPg(pool), schema, loadStatements(schema), {
          batchSize: 100,
          onProgress: async (progress) => {
            if (progress.step === 'finish')
              await admin.query(`ALTER TABLE "${schema}".relaybus_events DROP COLUMN key`);
          },
        }),
        (error: unknown) => {
          assert.ok(error instanceof UpgradePreconditionError, String(error));
          assert.match(error.message, /column relaybus_events\.key \(text\) is missing/);
          assert.match(
            error.message,
            /The upgrade had committed step 1 \(.+\) and step 2, 4 batches \(400 of 400 deliveries/,
          );
          assert.match(error.message, /the final step \(one transaction\) rolled back as a whole/);
          assert.match(error.message, /still has the 0\.1 layout/);
          return true;
        },
      );
      assert.ok(await hasMarker(schema), 'still the 0.1 layout');
      await admin.query(`ALTER TABLE "${schema}".relaybus_events ADD COLUMN key text`);
      const result = await setupPostgres(fromPg(pool), schema, loadStatements(schema), { batchSize: 100 });
      assert.deepEqual(result.applied, versions, 'resumed by running it again');
      assert.ok(!(await hasMarker(schema)));
    } finally {
      await pool.end();
    }
  });

  it('a final step that fails on the data says which steps committed and how to resume; run again, it finishes', async () => {
    const schema = await rowLeaseSchema('upgrade_dup', 150);
    // A 0.1 schema whose unique index went missing, with one (event, handler) pair twice: the new unique index refuses it.
    await admin.query(`DROP INDEX "${schema}".relaybus_deliveries_event_handler_unique`);
    const {
      rows: [dup],
    } = await admin.query<{ id: string }>(
      `INSERT INTO "${schema}".relaybus_deliveries (event_id, handler, key, sequence, status, attempts, max_attempts)
       SELECT event_id, handler, key, sequence, 'pending', 0, 3 FROM "${schema}".relaybus_deliveries
       WHERE status = 'pending' ORDER BY id LIMIT 1 RETURNING id::text`,
    );
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      await assert.rejects(
        setupPostgres(fromPg(pool), schema, loadStatements(schema), { batchSize: 100 }),
        (error: unknown) => {
          assert.ok(error instanceof UpgradeInterruptedError, String(error));
          assert.ok(error instanceof StoreUnavailableError);
          assert.equal(error.retryable, false);
          assert.equal(error.failedStep, 'finish');
          assert.equal(error.committed.length, 2, error.committed.join('\n'));
          assert.match(
            error.message,
            /stopped in the final step \(one transaction\): setup\(\) of schema .+ \(SQLSTATE 23505\)/,
          );
          assert.match(
            error.message,
            /The upgrade had committed step 1 .+ and step 2, 4 batches \(301 of 301 deliveries/,
          );
          assert.match(error.message, /rolled back as a whole\. The schema still has the 0\.1 layout/);
          assert.match(error.message, /To resume, remove the cause, then run relaybus upgrade \(or setup\(\)\) again/);
          return true;
        },
      );
      assert.ok(await hasMarker(schema), 'the final step rolled back: still the 0.1 layout');
      await admin.query(`DELETE FROM "${schema}".relaybus_deliveries WHERE id = $1`, [dup!.id]);
      const result = await setupPostgres(fromPg(pool), schema, loadStatements(schema), { batchSize: 100 });
      assert.deepEqual(result.applied, versions);
      assert.ok(!(await hasMarker(schema)));
    } finally {
      await pool.end();
    }
  });
});
