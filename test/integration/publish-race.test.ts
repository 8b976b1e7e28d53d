/**
 * A batch publish racing a concurrent transaction for one of its ids, on real Postgres. The publish statements see
 * an id as new, and a concurrent transaction inserts it first and commits while the statement waits on it
 * (`ON CONFLICT DO NOTHING` then writes nothing for it). Before the fix the store took that for a duplicate: an event
 * of another type under that id was dropped without a word. Now the store publishes the raced events again against
 * the committed ones: a duplicate gets only the handlers it never had, a conflict is an `EventConflictError` and the
 * whole batch is taken back (all or nothing), the caller's transaction still usable.
 *
 * Both publish paths are covered: the lean one (every id new when it looked) and the full one (the batch also holds
 * an id that existed already).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { EventConflictError } from '../../src/core/errors.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import type { PublishParams } from '../../src/store/contract.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { waitFor } from '../support/wait.js';

const found = await findPostgres();

const event = (id: string, type: string, handlers: readonly string[], key?: string): PublishParams => ({
  id,
  type,
  payload: { id },
  ...(key === undefined ? {} : { key }),
  handlers: handlers.map((name) => ({ name, maxAttempts: 3 })),
});

describe('publish racing a concurrent insert of one of its ids', { skip: 'skip' in found ? found.skip : false }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('publish_race', 6, (opened) => ({ pool, store } = opened));

  /** Rows of the schema, for "nothing written" and "what was written" checks. */
  async function rows(ids: readonly string[]) {
    const events = await pool.query<{ id: string; type: string; handlers: string[] }>(
      `SELECT id, type, handlers FROM "${schema}".relaybus_events WHERE id = ANY ($1) ORDER BY id`,
      [ids],
    );
    const deliveries = await pool.query<{ event_id: string; handler: string }>(
      `SELECT event_id, handler FROM "${schema}".relaybus_deliveries WHERE event_id = ANY ($1) ORDER BY event_id, handler`,
      [ids],
    );
    return { events: events.rows, deliveries: deliveries.rows.map((d) => `${d.event_id}/${d.handler}`).sort() };
  }

  /**
   * T2 publishes `racer` and holds its transaction open; T1 publishes `batch` (it blocks on the racer's id); T2
   * commits. Returns T1's publish outcome, T1's client still in its transaction (the caller commits or checks it).
   */
  async function race(racer: PublishParams, batch: readonly PublishParams[]) {
    const t2 = await pool.connect();
    const t1 = await pool.connect();
    try {
      await t2.query('BEGIN');
      await store.publish(t2, [racer]);
      await t1.query('BEGIN');
      const outcome = store.publish(t1, batch).then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
      // T1 waits on T2's uncommitted row of the shared id (a lock wait on T2's transaction id).
      await waitFor(async () => {
        const { rows: waiting } = await pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
        );
        return waiting.length > 0;
      }, 'the batch publish waits on the concurrent transaction');
      await t2.query('COMMIT');
      return { t1, result: await outcome };
    } catch (error) {
      t1.release();
      throw error;
    } finally {
      t2.release();
    }
  }

  for (const path of ['lean (every id new)', 'full (an id exists)'] as const) {
    const prefix = path.startsWith('lean') ? 'lean' : 'full';
    const existing = path.startsWith('full') ? [event(`${prefix}-old`, 'race.one', ['h1'])] : [];

    it(`${path}: an id committed first as another event type is a conflict, and the batch writes nothing`, async () => {
      const setup = await pool.connect();
      try {
        await setup.query('BEGIN');
        if (existing.length > 0) await store.publish(setup, existing);
        await setup.query('COMMIT');
      } finally {
        setup.release();
      }
      const racer = event(`${prefix}-b`, 'race.two', ['h2'], 'k');
      const batch = [
        event(`${prefix}-a`, 'race.one', ['h1', 'h2'], 'k'),
        ...existing.map((e) => ({ ...e, handlers: [...e.handlers, { name: 'h3', maxAttempts: 3 }] })),
        event(`${prefix}-b`, 'race.one', ['h1'], 'k'),
        event(`${prefix}-c`, 'race.one', ['h1']),
      ];
      const { t1, result } = await race(racer, batch);
      try {
        assert.ok('error' in result, `expected a conflict, got ${JSON.stringify(result)}`);
        assert.ok(result.error instanceof EventConflictError, String(result.error));
        assert.equal(result.error.eventId, `${prefix}-b`);
        assert.deepEqual(result.error.differences, ['type']);
        // The caller's transaction is usable, and committing it writes nothing of the batch.
        await t1.query('SELECT 1');
        await t1.query('COMMIT');
      } finally {
        t1.release();
      }
      const after = await rows([`${prefix}-a`, `${prefix}-b`, `${prefix}-c`, `${prefix}-old`]);
      assert.deepEqual(
        after.events.map((e) => `${e.id}:${e.type}:${e.handlers.join('+')}`).sort(),
        [`${prefix}-b:race.two:h2`, ...existing.map((e) => `${e.id}:race.one:h1`)].sort(),
      );
      assert.deepEqual(after.deliveries, [`${prefix}-b/h2`, ...existing.map((e) => `${e.id}/h1`)].sort());
    });

    it(`${path}: an id committed first as the same event is a duplicate that gets only the handlers it lacked`, async () => {
      const setup = await pool.connect();
      try {
        await setup.query('BEGIN');
        if (existing.length > 0)
          await store.publish(
            setup,
            existing.map((e) => ({ ...e, id: `${e.id}-2` })),
          );
        await setup.query('COMMIT');
      } finally {
        setup.release();
      }
      const racer = event(`${prefix}-d`, 'race.one', ['h1'], 'k');
      const batch = [
        event(`${prefix}-e`, 'race.one', ['h1'], 'k'),
        ...existing.map((e) => ({ ...e, id: `${e.id}-2`, handlers: [...e.handlers, { name: 'h3', maxAttempts: 3 }] })),
        event(`${prefix}-d`, 'race.one', ['h1', 'h2'], 'k'),
      ];
      const { t1, result } = await race(racer, batch);
      try {
        assert.ok('value' in result, `expected results, got ${String((result as { error: unknown }).error)}`);
        assert.deepEqual(
          result.value.map((r) => `${r.eventId}:${r.duplicate}:${r.addedHandlers.join('+')}`),
          [`${prefix}-e:false:h1`, ...existing.map((e) => `${e.id}-2:true:h3`), `${prefix}-d:true:h2`],
        );
        await t1.query('COMMIT');
      } finally {
        t1.release();
      }
      const after = await rows([`${prefix}-d`, `${prefix}-e`, ...existing.map((e) => `${e.id}-2`)]);
      assert.deepEqual(
        after.deliveries,
        [
          `${prefix}-d/h1`,
          `${prefix}-d/h2`,
          `${prefix}-e/h1`,
          ...existing.flatMap((e) => [`${e.id}-2/h1`, `${e.id}-2/h3`]),
        ].sort(),
      );
    });
  }
});
