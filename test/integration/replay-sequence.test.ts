/**
 * Every path that writes an events row for a keyed event records its key-order value (events.sequence, what a
 * backfill replays in): one event (publish-new-one), a batch (publish-new), a batch with an id that exists (publish),
 * and the SQL function relaybus_publish. The value is the one its first deliveries got; unkeyed events record none.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';

const found = await findPostgres();

describe('events record their key-order value on every publish path', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('replay_sequence', 4, (opened) => ({ pool, store } = opened));

  it('one event, a batch, a batch with an existing id, and relaybus_publish', async () => {
    await store.subscribe([{ eventType: 't', handler: 'h1', maxAttempts: 3 }]);
    const publish = (events: { id: string; key: string | null }[]) =>
      store.transaction((tx) =>
        store.publish(
          tx,
          events.map((e) => ({ ...e, type: 't', payload: { id: e.id }, handlers: [] })),
        ),
      );
    await publish([{ id: 'one', key: 'k1' }]);
    await publish([
      { id: 'batch1', key: 'k1' },
      { id: 'batch2', key: 'k2' },
      { id: 'batch3', key: null },
    ]);
    await store.subscribe([{ eventType: 't', handler: 'h2', maxAttempts: 3 }]);
    // 'one' exists: the store takes the general publish; it adds h2's delivery to 'one' and writes 'again'.
    await publish([
      { id: 'one', key: 'k1' },
      { id: 'again', key: 'k3' },
    ]);
    await pool.query(`SELECT "${schema}".relaybus_publish('t', '{}'::jsonb, 'k4', 'sql')`);
    await pool.query(`SELECT "${schema}".relaybus_publish('t', '{}'::jsonb, NULL, 'sql-unkeyed')`);
    const { rows } = await pool.query<{ id: string; recorded: string | null; first: string | null }>(
      `SELECT e.id, e.sequence::text AS recorded,
              (SELECT min(d.sequence)::text FROM "${schema}".relaybus_deliveries d WHERE d.event_id = e.id) AS first
       FROM "${schema}".relaybus_events e ORDER BY e.id`,
    );
    assert.deepEqual(
      rows.map((r) => r.id),
      ['again', 'batch1', 'batch2', 'batch3', 'one', 'sql', 'sql-unkeyed'],
    );
    for (const row of rows) {
      if (row.id === 'batch3' || row.id === 'sql-unkeyed') assert.equal(row.recorded, null, row.id);
      else {
        assert.notEqual(row.recorded, null, `${row.id} records its value`);
        assert.equal(row.recorded, row.first, `${row.id}: the value of its first deliveries`);
      }
    }
  });
});
