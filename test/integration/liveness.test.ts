/**
 * Liveness of the whole delivery path, in process, on real Postgres: no backlog shape stops a due
 * head. Before the claim walked keys, a retried head due later than its followers was never read
 * again (the capped scan filled with blocked followers: `delivered 0/50` after 30 s), and a deep
 * backlog of one key starved every other key of its lane.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { laneOf } from '../../src/core/lanes.js';
import { InvalidInputError } from '../../src/core/errors.js';
import { createRelayBus, defineEvent, Type, type FailedEvent } from '../../src/index.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import type pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';
import { keysInLane } from '../support/lanes.js';
import { usePgStore } from '../support/pg-store.js';
import { collect, pause, spyStore, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const Step = defineEvent('liveness.step', Type.Object({ n: Type.Integer() }));
/** Its own event type: the stored subscriptions of the other cases' handlers do not fan out to it. */
const Stream = defineEvent('liveness.stream', Type.Object({ n: Type.Integer() }));
const POLL_MS = 50;
const BACKOFF_MS = 1_500;

describe('liveness of the delivery path on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let store: PostgresStore<PgClientLike>;
  let pool: pg.Pool;
  const schema = usePgStore('liveness', 8, (opened) => ({ store, pool } = opened));

  /** A bus whose handler fails the first `failures` attempts of the deliveries `fails` picks. */
  function busWith(failures: number, fails: (key: string | null, n: number) => boolean) {
    const bus = createRelayBus({
      store,
      events: [Step],
      backoff: { initialDelayMs: BACKOFF_MS, maxDelayMs: BACKOFF_MS, jitter: 0 },
      dispatcher: { pollIntervalMs: POLL_MS, concurrency: 20, batchSize: 20, leaseDurationMs: 10_000 },
    });
    const runs: { key: string | null; n: number; attempt: number; at: number }[] = [];
    bus.on(Step, 'step', { maxAttempts: failures + 2 }, (payload, ctx) => {
      runs.push({ key: ctx.delivery.key, n: payload.n, attempt: ctx.delivery.attempt, at: performance.now() });
      if (ctx.delivery.attempt <= failures && fails(ctx.delivery.key, payload.n))
        throw new Error(`failing attempt ${ctx.delivery.attempt}`);
    });
    return { bus, runs };
  }

  async function publish(
    bus: ReturnType<typeof busWith>['bus'],
    items: readonly { key: string; n: number }[],
  ): Promise<void> {
    for (let from = 0; from < items.length; from += 1_000) {
      await store.transaction((tx) =>
        bus.publishMany(
          tx,
          items.slice(from, from + 1_000).map(({ key, n }) => ({ event: Step, payload: { n }, options: { key } })),
        ),
      );
    }
  }

  it('50 events of one key whose first attempt fails once: all delivered in order, the head retried when due', async () => {
    const { bus, runs } = busWith(1, (_key, n) => n === 0);
    const failed = collect(bus.lifecycle, 'failed');
    await publish(
      bus,
      Array.from({ length: 50 }, (_, n) => ({ key: 'solo', n })),
    );
    await bus.start();
    try {
      await waitFor(
        () => runs.filter((r) => r.attempt === 1 || r.n === 0).length >= 51,
        `all 50 delivered (ran ${runs.length})`,
        15_000,
      );
    } finally {
      await bus.stop();
    }
    assert.deepEqual(
      runs.map((r) => r.n),
      [0, ...Array.from({ length: 50 }, (_, n) => n)],
      'the head, its retry, then the rest in order',
    );
    assertRetriedWhenDue(failed, runs);
  });

  it('a key with 10,000 pending behind a head that fails three times does not hold back 500 other keys of its lane', async () => {
    const deep = 'deep-key';
    const lane = laneOf(deep, 'unused');
    const others = keysInLane(lane, 'other', 500);
    const { bus, runs } = busWith(3, (key, n) => key === deep && n === 0);
    const failed = collect(bus.lifecycle, 'failed');
    const lost = collect(bus.lifecycle, 'lease-lost');
    await publish(
      bus,
      Array.from({ length: 10_000 }, (_, n) => ({ key: deep, n })),
    );
    await publish(
      bus,
      others.flatMap((key) => [
        { key, n: 0 },
        { key, n: 1 },
      ]),
    );
    await bus.start();
    try {
      // The other keys' 1,000 deliveries drain while the deep head backs off three times (at least 4.5 s).
      await waitFor(
        () => runs.filter((r) => r.key !== deep).length >= 1_000,
        `the other keys drained (${runs.filter((r) => r.key !== deep).length}/1000)`,
        20_000,
      );
      const headRuns = runs.filter((r) => r.key === deep && r.n === 0);
      assert.ok(
        headRuns.length <= 3,
        `the other keys were done before the deep head's fourth attempt (attempts so far: ${headRuns.length})`,
      );
      await waitFor(
        () => runs.some((r) => r.key === deep && r.n === 20),
        'the deep key moves on after its head succeeded',
        20_000,
      );
    } finally {
      await bus.stop();
    }
    const deepRuns = runs.filter((r) => r.key === deep);
    assert.deepEqual(
      deepRuns.slice(0, 4).map((r) => `${r.n}#${r.attempt}`),
      ['0#1', '0#2', '0#3', '0#4'],
    );
    const afterHead = deepRuns.slice(4).map((r) => r.n);
    assert.deepEqual(
      afterHead,
      afterHead.map((_, i) => i + 1),
      'the deep key runs in order, one at a time',
    );
    for (const key of others) {
      assert.deepEqual(
        runs.filter((r) => r.key === key).map((r) => r.n),
        [0, 1],
        `${key} ran once each, in order`,
      );
    }
    assertRetriedWhenDue(failed, runs);
    assert.equal(lost.length, 0, 'one dispatcher never loses a lane to itself (a lane handed back and taken again)');
  });

  it('a retried head is among the first claimed once due, even in a lane full of other due keys', async () => {
    const retried = 'a-retried-key'; // first in the walk's key order: the walk reaches it only after wrapping round
    const lane = laneOf(retried, 'unused');
    const others = keysInLane(lane, 'other', 60);
    const handlers = [{ name: 'probe', maxAttempts: 5 }];
    const t0 = new Date('2030-01-01T00:00:00Z');
    await store.transaction((tx) =>
      store.publish(
        tx,
        [retried, ...others].flatMap((key) =>
          [0, 1].map((n) => ({
            type: 'liveness.step',
            key,
            payload: { n },
            handlers,
            id: `${key}-${n}`,
          })),
        ),
        t0,
      ),
    );
    const claim = (now: Date) =>
      owners.claim(store, { owner: 'probe-owner', handlers: ['probe'], limit: 5, leaseDurationMs: 60_000, now });
    const first = await claim(t0);
    const head = first.find((d) => d.key === retried);
    assert.ok(head, 'the first claim starts the walk at the first key');
    assert.equal(
      await store.reschedule(
        { deliveryId: head.id, leaseToken: head.leaseToken },
        { availableAt: new Date(t0.getTime() + 10_000), error: 'once', now: t0 },
      ),
      true,
    );
    await store.completeMany(
      first.filter((d) => d !== head).map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })),
      t0,
    );
    const due = new Date(t0.getTime() + 10_000);
    const next = await claim(due);
    assert.ok(
      next.some((d) => d.id === head.id),
      `the retried head is claimed in the first claim after it is due (got ${next.map((d) => d.eventId).join(', ')})`,
    );
    assert.equal(next.length, 5);
  });

  /** Every failure was retried, starting within a poll interval (plus scheduling slack) of being due. */
  function assertRetriedWhenDue(
    failed: readonly FailedEvent[],
    runs: readonly { n: number; attempt: number; at: number; key: string | null }[],
  ): void {
    const slackMs = 750; // a loaded CI machine: the claim itself takes a head the moment it is due
    for (const failure of failed) {
      const key = failure.delivery.key;
      const failing = runs.find((r) => r.key === key && r.n === 0 && r.attempt === failure.delivery.attempt);
      const retry = runs.find((r) => r.key === key && r.n === 0 && r.attempt === failure.delivery.attempt + 1);
      assert.ok(failing && retry, `attempt ${failure.delivery.attempt + 1} of ${key} ran`);
      const gap = retry.at - failing.at; // the retry is due BACKOFF_MS after the failing attempt (a no-op handler)
      assert.ok(
        gap >= BACKOFF_MS - 5 && gap <= BACKOFF_MS + POLL_MS + slackMs,
        `retry of ${key} started ${gap.toFixed(0)} ms after the failure (due after ${BACKOFF_MS} ms)`,
      );
    }
  }
  it('an idle worker starts a retry when it is due, not at its next poll (no NOTIFY, a 10 s poll)', async () => {
    const quiet = postgresStore({ driver: fromPg(pool), schema, notify: false });
    const retryMs = 300;
    const bus = createRelayBus({
      store: quiet,
      events: [Step],
      setupStore: false,
      backoff: { initialDelayMs: retryMs, maxDelayMs: retryMs, jitter: 0 },
      dispatcher: { pollIntervalMs: 10_000, concurrency: 4, batchSize: 4 },
    });
    const attempts: number[] = [];
    bus.on(Step, 'alarm', { maxAttempts: 3 }, (_payload, ctx) => {
      attempts.push(performance.now());
      if (ctx.delivery.attempt === 1) throw new Error('first attempt fails');
    });
    await quiet.transaction((tx) => bus.publish(tx, Step, { n: 1 }, { key: 'alarm' }));
    await bus.start();
    try {
      await waitFor(() => attempts.length >= 2, 'the retry ran', 5_000);
    } finally {
      await bus.stop();
    }
    const lag = attempts[1]! - attempts[0]! - retryMs;
    assert.ok(lag < 1_500, `retry started ${Math.round(lag)} ms after it was due (the poll is 10 s)`);
  });

  it('under a steady stream of announced publishes, work no publish announced is claimed within a few polls', async () => {
    // Every claim that looks at free lanes is the poll's, and under the stream a wake-up has always named a lane to it
    // that gives work: such a claim once skipped the free lanes, and a publish without NOTIFY (or a delayed one come
    // due) in a free lane waited for a quiet moment (10 s and more).
    const quiet = postgresStore({ driver: fromPg(pool), schema, notify: false });
    const bus = createRelayBus({
      store,
      events: [Stream],
      setupStore: false,
      dispatcher: { pollIntervalMs: POLL_MS, concurrency: 20, batchSize: 20 },
    });
    const startedAt = new Map<number, number>();
    bus.on(Stream, 'stream', (payload) => {
      startedAt.set(payload.n, performance.now());
    });
    const streamKey = 'stream';
    /** A key in the lane `offset` lanes after the stream's: each event below in a free lane of its own. */
    const keyBeside = (offset: number, prefix: string): string =>
      keysInLane((laneOf(streamKey, '') + offset) % 256, prefix, 1)[0]!;
    const [quietKey, laterKey, orphanKey] = [keyBeside(85, 'quiet'), keyBeside(170, 'later'), keyBeside(213, 'orphan')];
    await bus.start();
    let streaming = true;
    const stream = (async () => {
      for (let n = 1; streaming; n += 1) {
        await store.transaction((tx) => bus.publish(tx, Stream, { n }, { key: streamKey }));
        await pause(5);
      }
    })();
    try {
      await pause(300);
      const dueInMs = 300;
      const published = performance.now();
      await quiet.transaction((tx) => bus.publish(tx, Stream, { n: -1 }, { key: quietKey }));
      await store.transaction((tx) =>
        bus.publish(tx, Stream, { n: -2 }, { key: laterKey, availableAt: new Date(Date.now() + dueInMs) }),
      );
      // A lane a crashed worker held, its lease expired: a claim takes only free lanes a wake-up names, so acquiring
      // (which takes expired lanes over) is the only way to it, announced or not.
      await pool.query(
        `UPDATE "${schema}".relaybus_lanes SET lease_owner = 'crashed-worker', epoch = epoch + 1,
           lease_expires_at = now() - interval '1 second' WHERE lane = $1 AND lease_owner IS NULL`,
        [laneOf(orphanKey, '')],
      );
      await store.transaction((tx) => bus.publish(tx, Stream, { n: -3 }, { key: orphanKey }));
      await waitFor(
        () => startedAt.has(-1) && startedAt.has(-2) && startedAt.has(-3),
        'the unannounced, the delayed and the orphaned event ran',
        5_000,
      );
      const orphaned = startedAt.get(-3)! - published;
      assert.ok(
        orphaned < 10 * POLL_MS,
        `the event in the expired lane ran ${orphaned.toFixed(0)} ms after its publish`,
      );
      const unannounced = startedAt.get(-1)! - published;
      const afterDue = startedAt.get(-2)! - published - dueInMs;
      assert.ok(unannounced < 10 * POLL_MS, `the unannounced event ran ${unannounced.toFixed(0)} ms after its publish`);
      assert.ok(afterDue < 10 * POLL_MS, `the delayed event ran ${afterDue.toFixed(0)} ms after it was due`);
      assert.ok(afterDue > -5, 'not before it was due');
    } finally {
      streaming = false;
      await stream;
      await bus.stop();
    }
  });

  it('a retried head due within the lookahead is claimed early with notBefore; nothing else comes early', async () => {
    const handlers = [{ name: 'lookahead', maxAttempts: 5 }];
    const t0 = new Date('2031-01-01T00:00:00Z');
    const at = (ms: number) => new Date(t0.getTime() + ms);
    // Also when the claim takes free lanes first (a dispatcher under a light load): the head's lane, handed back while
    // it waits, has nothing due for an acquire to see, so the claim after the acquire must name it.
    for (const freeLanesFirst of [false, true]) {
      const owner = `lookahead-owner-${freeLanesFirst}`;
      const tag = freeLanesFirst ? 'first-' : '';
      await store.transaction((tx) =>
        store.publish(
          tx,
          [
            ...[0, 1].map((n) => ({
              type: 'liveness.step',
              key: `${tag}early`,
              payload: { n },
              handlers,
              id: `${tag}early-${n}`,
            })),
            // Due at +300 but never rescheduled by this store: no probe, so no lookahead either.
            {
              type: 'liveness.step',
              key: `${tag}delayed`,
              payload: { n: 0 },
              handlers,
              id: `${tag}delayed-0`,
              availableAt: at(300),
            },
          ],
          t0,
        ),
      );
      const claim = (now: Date, retryLookaheadMs: number) =>
        owners.claim(store, {
          owner,
          handlers: ['lookahead'],
          limit: 10,
          leaseDurationMs: 60_000,
          now,
          retryLookaheadMs,
          ...(freeLanesFirst ? { freeLanes: 'first' as const } : {}),
        });
      try {
        const [head, ...rest] = await claim(t0, 0);
        assert.equal(head?.eventId, `${tag}early-0`);
        assert.deepEqual(rest, [], 'the follower waits for its head; the delayed event is not due');
        assert.equal(head.notBefore, undefined, 'a due delivery has no notBefore');
        const lease = { deliveryId: head.id, leaseToken: head.leaseToken };
        assert.equal(await store.reschedule(lease, { availableAt: at(400), error: 'once', now: t0 }), true);

        assert.deepEqual(await claim(at(100), 0), [], 'without a lookahead: nothing before +400');
        assert.deepEqual(await claim(at(100), 250), [], 'a lookahead that ends before +400');
        const early = await claim(at(100), 400);
        assert.deepEqual(
          early.map((d) => d.eventId),
          [`${tag}early-0`],
          'the retried head, and not the delayed event (due at +300, but not a retry of this store)',
        );
        assert.equal(early[0]!.notBefore?.toISOString(), at(400).toISOString());
        assert.equal(early[0]!.attempts, 1);
      } finally {
        await owners.relinquish(store, owner);
      }
    }
    for (const bad of [-1, 0.5, 1_001, '10'])
      await assert.rejects(
        owners.claim(store, {
          owner: 'lookahead-owner',
          handlers: ['lookahead'],
          limit: 1,
          leaseDurationMs: 1_000,
          retryLookaheadMs: bad as number,
        }),
        (error: Error) =>
          error instanceof InvalidInputError &&
          /retryLookaheadMs must be an integer from 0 to 1000/.test(error.message),
      );
  });

  /**
   * A bus whose store's claims take 200 ms longer (recording every delivery they return), with a constant backoff of
   * `retryMs`.
   */
  function busWithSlowClaims(retryMs: number) {
    const { slow, claimed } = slowClaims(200);
    const bus = createRelayBus({
      store: slow,
      events: [Step],
      setupStore: false,
      backoff: { initialDelayMs: retryMs, maxDelayMs: retryMs, jitter: 0 },
      dispatcher: { pollIntervalMs: POLL_MS, concurrency: 4, batchSize: 4 },
    });
    return { bus, claimed };
  }

  /** A store whose claims take `ms` longer, recording every delivery they return. */
  function slowClaims(ms: number) {
    const claimed: { delivery: ClaimedDelivery; at: number }[] = [];
    const note = (list: ClaimedDelivery[]) => {
      for (const delivery of list) claimed.push({ delivery, at: Date.now() });
      return list;
    };
    const { store: slow } = spyStore(store, {
      claim: async (params) => {
        await pause(ms);
        return note(await owners.claim(store, params));
      },
      completeAndClaim: async (leases, params) => {
        await pause(ms);
        const result = await owners.completeAndClaim(store, leases, params);
        note(result.claimed);
        return result;
      },
    });
    return { slow, claimed };
  }

  it('under claims of 200 ms a retried head is claimed before it is due and starts when due, not before', async () => {
    const { bus, claimed } = busWithSlowClaims(800);
    const starts: number[] = [];
    bus.on(Step, 'held', { maxAttempts: 3 }, (_payload, ctx) => {
      starts.push(Date.now());
      if (ctx.delivery.attempt === 1) throw new Error('first attempt fails');
    });
    const failed = collect(bus.lifecycle, 'failed');
    await store.transaction((tx) => bus.publish(tx, Step, { n: 1 }, { key: 'held' }));
    await bus.start();
    try {
      await waitFor(() => starts.length >= 2, 'the retry ran', 10_000);
    } finally {
      await bus.stop();
    }
    const due = failed[0]!.retryAt.getTime();
    const retry = claimed.find((c) => c.delivery.attempts === 1);
    assert.ok(retry, 'a claim returned the retried head');
    assert.equal(retry.delivery.notBefore?.getTime(), due, 'claimed early, with its due time as notBefore');
    assert.ok(retry.at < due, `claimed ${due - retry.at} ms before it was due`);
    const lag = starts[1]! - due;
    // Without the lookahead the claim that takes it starts after it is due, so it would start at least 200 ms late.
    assert.ok(lag >= 0 && lag < 150, `the retry started ${lag} ms after it was due`);
  });

  it('a stop while a retried head waits to start releases it: its handler does not run again', async () => {
    const { bus, claimed } = busWithSlowClaims(1_000);
    let runs = 0;
    bus.on(Step, 'stopped-while-held', { maxAttempts: 3 }, () => {
      runs += 1;
      throw new Error('fails every time');
    });
    await store.transaction((tx) => bus.publish(tx, Step, { n: 1 }, { key: 'stopped-while-held' }));
    await bus.start();
    try {
      await waitFor(
        () => claimed.some((c) => c.delivery.notBefore !== undefined),
        'the retry was claimed early',
        10_000,
      );
    } finally {
      await bus.stop();
    }
    const held = claimed.find((c) => c.delivery.notBefore !== undefined)!;
    assert.ok(Date.now() < held.delivery.notBefore!.getTime(), 'stop did not wait for the retry to be due');
    assert.equal(runs, 1, 'the held retry never started');
    const { rows } = await pool.query(
      `SELECT attempts, status FROM "${schema}".relaybus_deliveries WHERE handler = 'stopped-while-held'`,
    );
    assert.deepEqual(rows, [{ attempts: 1, status: 'pending' }], 'released: pending, no attempt charged for it');
  });
});
