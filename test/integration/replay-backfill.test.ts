/**
 * Replay on real Postgres: a backfill of a new handler while live events of the same keys are published concurrently
 * (each key's history runs before its live events, each event once); the quiesce (a delivery in flight at the start
 * makes steps wait until it completes); a replay interrupted between steps and continued by another store instance
 * (nothing twice, nothing skipped); events without a recorded key-order value replay by created_at before the
 * recorded ones.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import type { ClaimedDelivery, ReplayState } from '../../src/store/contract.js';
import * as owners from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { pause } from '../support/wait.js';

const found = await findPostgres();
const TYPE = 'order.placed';

describe('replay on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('replay', 8, (opened) => ({ pool, store } = opened));

  async function publish(events: { id: string; key: string | null; type?: string }[]): Promise<void> {
    await store.transaction((tx) =>
      store.publish(
        tx,
        events.map((e) => ({ id: e.id, type: e.type ?? TYPE, key: e.key, payload: { id: e.id }, handlers: [] })),
      ),
    );
  }

  async function subscribe(handler: string, eventType = TYPE): Promise<void> {
    await store.subscribe([{ eventType, handler, maxAttempts: 3 }]);
  }

  /** One claim of `handler`'s deliveries, completed at once; returns them in claim order. */
  async function claimAndComplete(owner: string, handler: string): Promise<ClaimedDelivery[]> {
    const claimed = await owners.claim(store, { owner, handlers: [handler], limit: 10, leaseDurationMs: 30_000 });
    if (claimed.length > 0)
      assert.ok(
        (await store.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })))).every(Boolean),
      );
    return claimed;
  }

  async function replayDeliveries(replayId: string): Promise<Map<string, number>> {
    const created = await pool.query<{ event_id: string; n: number }>(
      `SELECT event_id, count(*)::int AS n FROM "${schema}".relaybus_deliveries WHERE replay_id = $1 GROUP BY 1`,
      [replayId],
    );
    return new Map(created.rows.map((r) => [r.event_id, r.n]));
  }

  it("backfills a new handler while live events of its keys are published: each key's history first, each event once", {
    timeout: 60_000,
  }, async () => {
    await subscribe('emails');
    const keys = Array.from({ length: 6 }, (_, i) => `k${i}`);
    for (let n = 0; n < 5; n++) await publish(keys.map((key) => ({ id: `h${key}n${n}`, key })));
    await subscribe('audit');
    const replay = await store.startReplay({
      mode: 'backfill',
      handlers: ['audit'],
      requestedBy: 'test',
      reason: 'new',
    });
    assert.equal(replay.state, 'running');
    assert.equal(replay.total, 30);

    const seen = new Map<string, string[]>(keys.map((key) => [key, []]));
    let live = 0;
    const publisher = (async () => {
      for (; live < 8; live++) await publish(keys.map((key) => ({ id: `l${key}n${live}`, key })));
    })();
    let state: ReplayState = replay.state;
    let rounds = 0;
    while (state === 'running' || live < 8 || [...seen.values()].some((ids) => ids.length < 13)) {
      assert.ok(++rounds < 2_000, 'the replay and the live events drain');
      if (state === 'running') {
        const result = await store.replayStep({ replayId: replay.id, limit: 4 });
        state = result.replay.state;
        if (result.waiting !== undefined) await pause(10);
      }
      for (const c of await claimAndComplete('worker-audit', 'audit')) seen.get(c.key!)!.push(c.eventId);
      await claimAndComplete('worker-emails', 'emails');
    }
    await publisher;
    assert.equal(state, 'finished');
    for (const key of keys) {
      const expected = [
        ...Array.from({ length: 5 }, (_, n) => `h${key}n${n}`),
        ...Array.from({ length: 8 }, (_, n) => `l${key}n${n}`),
      ];
      assert.deepEqual(seen.get(key), expected, `key ${key}: history in order, then live, each once`);
    }
    const done = (await store.getReplay(replay.id))!;
    assert.deepEqual([done.created, done.skipped, done.total, done.state], [30, 0, 30, 'finished']);
    assert.ok(done.finishedAt instanceof Date);
    // The handler is now in every history event's handlers: a second backfill plans nothing.
    const plan = await store.planReplay({ mode: 'backfill', handlers: ['audit'] });
    assert.equal(plan.deliveries.audit, 0);
  });

  it("a replayed head brings its key's replayed rows as followers up to the next planned event, and no held live row", {
    timeout: 30_000,
  }, async () => {
    const type = 'deep.event';
    await subscribe('deep-mailer', type);
    await publish(Array.from({ length: 6 }, (_, n) => ({ id: `deep-h${n}`, key: 'deep', type })));
    await subscribe('deep-indexer', type);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['deep-indexer'], requestedBy: 'test' });
    assert.equal((await store.replayStep({ replayId: replay.id, limit: 4 })).created, 4);
    // Live events of the key, published after the start: held behind its history.
    await publish([
      { id: 'deep-l0', key: 'deep', type },
      { id: 'deep-l1', key: 'deep', type },
    ]);
    const params = { handlers: ['deep-indexer'], limit: 10, leaseDurationMs: 30_000, followers: 9 };
    const first = await owners.claim(store, { owner: 'deep-w', ...params });
    assert.deepEqual(
      first.map((c) => c.eventId),
      ['deep-h0', 'deep-h1', 'deep-h2', 'deep-h3'],
      'the head and every replayed row created so far, in order, and no live one',
    );
    assert.deepEqual(
      first.map((c) => c.follows ?? null),
      [null, first[0]!.id, first[1]!.id, first[2]!.id],
      'each follower after the one before it',
    );
    await store.completeMany(first.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
    assert.equal((await store.replayStep({ replayId: replay.id, limit: 10 })).created, 2);
    const second = await owners.claim(store, { owner: 'deep-w', ...params });
    assert.deepEqual(
      second.map((c) => c.eventId),
      ['deep-h4', 'deep-h5'],
      'the rest of the history once created, still no live event',
    );
  });

  it('a delivery in flight at the start makes the steps wait until it completes', { timeout: 30_000 }, async () => {
    await subscribe('other', 'quiesce');
    await publish([{ id: 'qa1', key: 'qk', type: 'quiesce' }]);
    await subscribe('billing', 'quiesce');
    await publish([{ id: 'qa2', key: 'qk', type: 'quiesce' }]);
    const claimed = await owners.claim(store, {
      owner: 'worker-q',
      handlers: ['billing'],
      limit: 10,
      leaseDurationMs: 30_000,
    });
    assert.deepEqual(
      claimed.map((c) => c.eventId),
      ['qa2'],
    );
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['billing'] });
    assert.equal(replay.total, 1);
    const waiting = await store.replayStep({ replayId: replay.id, limit: 10 });
    assert.deepEqual([waiting.created, waiting.waiting], [0, 'in-flight']);
    assert.ok(await store.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken }))));
    const stepped = await store.replayStep({ replayId: replay.id, limit: 10 });
    assert.deepEqual([stepped.created, stepped.waiting, stepped.outstanding], [1, undefined, 1]);
    await store.cancelReplay(replay.id);
  });

  it("a step's wake-up names the lanes it wrote, as a publish's does", { timeout: 30_000 }, async () => {
    await subscribe('first', 'wake');
    await publish(Array.from({ length: 12 }, (_, n) => ({ id: `w${n}`, key: `wk${n % 6}`, type: 'wake' })));
    await subscribe('second', 'wake');
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['second'] });
    const woken: (readonly number[] | undefined)[] = [];
    const unsubscribe = await store.subscribeWakeups!((lanes) => woken.push(lanes));
    try {
      await pause(300); // the listener wakes once when it connects
      woken.length = 0;
      const stepped = await store.replayStep({ replayId: replay.id, limit: 12 });
      assert.equal(stepped.created, 12);
      const written = await pool.query<{ lane: number }>(
        `SELECT DISTINCT lane FROM "${schema}".relaybus_deliveries WHERE replay_id = $1 ORDER BY lane`,
        [replay.id],
      );
      const deadline = Date.now() + 5_000;
      while (woken.length === 0 && Date.now() < deadline) await pause(20);
      assert.deepEqual(
        [...(woken[0] ?? [])].sort((a, b) => a - b),
        written.rows.map((row) => row.lane),
      );
    } finally {
      await unsubscribe();
      await store.cancelReplay(replay.id);
    }
  });

  it('a replay interrupted between steps is continued by another store instance: nothing twice, nothing skipped', {
    timeout: 30_000,
  }, async () => {
    await subscribe('first', 'resume');
    await publish(
      Array.from({ length: 20 }, (_, i) => ({
        id: `r${String(i).padStart(2, '0')}`,
        key: `rk${i % 3}`,
        type: 'resume',
      })),
    );
    await subscribe('late', 'resume');
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['late'] });
    assert.equal(replay.total, 20);
    await store.replayStep({ replayId: replay.id, limit: 3 });
    await store.replayStep({ replayId: replay.id, limit: 3 });
    const otherPool = new pg.Pool({ connectionString: 'url' in found ? found.url : '', max: 2 });
    try {
      const other = postgresStore({ driver: fromPg(otherPool), schema });
      let result = await other.replayStep({ replayId: replay.id, limit: 3 });
      assert.equal(result.replay.created, 9);
      let drained = false;
      for (let i = 0; i < 400 && result.replay.state === 'running'; i++) {
        result = await other.replayStep({ replayId: replay.id, limit: 3 });
        if (result.waiting === 'draining' && !drained) {
          // Every planned event once: then complete them (the late look waits for that).
          const created = await replayDeliveries(replay.id);
          assert.equal(created.size, 20);
          assert.ok([...created.values()].every((n) => n === 1));
          await otherPool.query(`DELETE FROM "${schema}".relaybus_deliveries WHERE replay_id = $1`, [replay.id]);
          drained = true;
        }
        // Transactions of other sessions open at the start may still run: the late look waits for them.
        if (result.waiting !== undefined) await pause(25);
      }
      assert.equal(result.replay.state, 'finished');
      assert.deepEqual([result.replay.created, result.replay.skipped], [20, 0]);
    } finally {
      await otherPool.end();
    }
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".relaybus_events WHERE type = 'resume' AND 'late' = ANY (handlers)`,
    );
    assert.equal(rows[0]!.n, 20);
  });

  it('events without a recorded key-order value replay by created_at, before the recorded ones', {
    timeout: 30_000,
  }, async () => {
    await subscribe('one', 'old');
    await publish([{ id: 'o3', key: 'ok', type: 'old' }]);
    await publish([{ id: 'o1', key: 'ok', type: 'old' }]);
    await publish([{ id: 'o2', key: 'ok', type: 'old' }]);
    const { rows } = await pool.query<{ id: string; sequence: string | null }>(
      `SELECT id, sequence::text FROM "${schema}".relaybus_events WHERE type = 'old' ORDER BY sequence`,
    );
    assert.deepEqual(
      rows.map((r) => r.id),
      ['o3', 'o1', 'o2'],
    );
    assert.ok(
      rows.every((r) => r.sequence !== null),
      'publish records the key-order value',
    );
    // As if o1 and o2 were published before the column existed: they come first, by created_at.
    await pool.query(`UPDATE "${schema}".relaybus_events SET sequence = NULL WHERE id IN ('o1', 'o2')`);
    await subscribe('two', 'old');
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['two'] });
    const step = await store.replayStep({ replayId: replay.id, limit: 10 });
    assert.equal(step.created, 3);
    const created = await pool.query<{ event_id: string; negative: boolean }>(
      `SELECT event_id, sequence < 0 AS negative FROM "${schema}".relaybus_deliveries WHERE replay_id = $1 ORDER BY sequence`,
      [replay.id],
    );
    assert.deepEqual(
      created.rows.map((r) => [r.event_id, r.negative]),
      [
        ['o1', true],
        ['o2', true],
        ['o3', false],
      ],
    );
    const order: string[] = [];
    for (let i = 0; i < 10 && order.length < 3; i++)
      for (const c of await claimAndComplete('worker-old', 'two')) order.push(c.eventId);
    assert.deepEqual(order, ['o1', 'o2', 'o3']);
    assert.equal((await store.cancelReplay(replay.id))?.state, 'cancelled');
  });

  it('a retried replayed head with a negative sequence is looked up by the retry probe (claimed within the lookahead)', {
    timeout: 30_000,
  }, async () => {
    await subscribe('p1', 'probe');
    await publish([{ id: 'p0', key: 'pk', type: 'probe' }]);
    await publish([{ id: 'p1', key: 'pk', type: 'probe' }]);
    await pool.query(`UPDATE "${schema}".relaybus_events SET sequence = NULL WHERE type = 'probe'`);
    await subscribe('p2', 'probe');
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['p2'] });
    assert.equal((await store.replayStep({ replayId: replay.id, limit: 10 })).created, 2);
    const claim = { owner: 'worker-p', handlers: ['p2'], leaseDurationMs: 30_000, retryLookaheadMs: 1_000 };
    const [head] = await owners.claim(store, { ...claim, limit: 1 });
    assert.equal(head?.eventId, 'p0');
    assert.ok(BigInt(head.sequence!) < 0n);
    // Due in 500 ms, within the lookahead: only the probe (from the lowest sequence) brings it before then; the walk
    // takes a head only once due.
    const due = new Date(Date.now() + 500);
    assert.ok(
      await store.reschedule(
        { deliveryId: head.id, leaseToken: head.leaseToken },
        { availableAt: due, error: 'retry' },
      ),
    );
    const again = await owners.claim(store, { ...claim, limit: 5 });
    assert.ok(Date.now() < due.getTime(), 'claimed before it was due');
    assert.deepEqual(
      again.map((c) => c.eventId),
      ['p0'],
      'the retried head, early',
    );
    await store.cancelReplay(replay.id);
  });
});
