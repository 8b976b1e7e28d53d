/**
 * Publishing from SQL: `<schema>.relaybus_publish(...)` and `<schema>.relaybus_lane(text)`, created by
 * schema/migrations/0002_publish_lean_subscriptions.sql. The function must do what `bus.publish` does, so every case
 * here compares it with the TypeScript side on real Postgres:
 *
 * - the lane: `relaybus_lane` equals `laneOf` (src/core/lanes.ts) on 100,000 generated keys (multi-byte, emoji,
 *   combining marks, CJK, lone surrogates, the empty string, long strings), hashed in a few large queries;
 * - the fan-out to the active subscriptions, the rows written (compared with a TypeScript publish of the same event),
 *   the NOTIFY at commit;
 * - per-key commit order with SQL and TypeScript publishes of one key interleaved in two transactions that commit in
 *   the reverse of their start order;
 * - inbox dedup (new handlers only, completed ones included) and conflicts (SQLSTATE 23505, nothing written);
 * - bad input (P0002, 22004, 22023; `allow_no_subscribers`), each followed by proof that nothing was written;
 * - the README's trigger example, run as written (read from README.md), with a running bus delivering what it
 *   publishes;
 * - a payload that fails its TypeBox schema (SQL cannot validate it): the worker must bury the delivery.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import pg from 'pg';
import { EventConflictError } from '../../src/core/errors.js';
import { LANE_COUNT, laneOf } from '../../src/core/lanes.js';
import { createRelayBus, defineEvent, Type, type Logger } from '../../src/index.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import { fileBlock } from '../docs/doc-set.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { deferred, pause, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();

/** The README block (by its `<!-- snippet: file=... -->` marker) this file runs as written. */
const README_TRIGGER = 'orders-publish-trigger.sql';
const LANE_KEYS = 100_000;
const LANE_BATCHES = 4;

const Fanout = defineEvent('sqlpub.fanout', Type.Object({ n: Type.Integer(), note: Type.String() }));
const Ordered = defineEvent('sqlpub.ordered', Type.Object({ step: Type.String() }));
const Dedup = defineEvent('sqlpub.dedup', Type.Object({ n: Type.Integer(), tags: Type.Array(Type.String()) }));
const DedupOther = defineEvent('sqlpub.dedup-other', Type.Object({ n: Type.Integer() }));
/** The quick start's event: the README trigger publishes it. */
const OrderPlaced = defineEvent('order.placed', Type.Object({ orderId: Type.String(), customerId: Type.String() }));

/** One `relaybus_publish` call. JSON arguments are JSON text; `null` passes SQL NULL; an absent one takes the default. */
interface SqlPublish {
  readonly type: string | null;
  readonly payload: string | null;
  readonly key?: string | null;
  readonly id?: string | null;
  readonly headers?: string | null;
  readonly availableAt?: Date | null;
  readonly allowNoSubscribers?: boolean;
}

interface Snapshot {
  readonly events: readonly unknown[];
  readonly deliveries: readonly unknown[];
}

type Kind = 'sql' | 'ts';

/** A deterministic generator (mulberry32): a failing key can be found again. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Keys of every UTF-8 length class and the shapes that break hand-written hashing or array transport: the empty
 * string, quotes, backslashes, braces, "NULL", NFC and NFD forms of one letter (hashed as bytes, never normalised),
 * lone surrogates (both sides encode them as U+FFFD), emoji ZWJ sequences, and strings up to 200,000 characters.
 * No NUL: Postgres text cannot hold one.
 */
function laneKeys(count: number): string[] {
  const random = seeded(0x5eed1a4e);
  const int = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1));
  const pick = <T>(items: readonly T[]): T => items[int(0, items.length - 1)]!;
  const fromRanges = (ranges: readonly (readonly [number, number])[], length: number): string => {
    let text = '';
    for (let i = 0; i < length; i += 1) {
      const [lo, hi] = pick(ranges);
      text += String.fromCodePoint(int(lo, hi));
    }
    return text;
  };
  const ASCII = [[0x01, 0x7f]] as const;
  const TWO_BYTES = [[0x80, 0x7ff]] as const;
  const THREE_BYTES = [
    [0x800, 0xd7ff],
    [0xe000, 0xffff],
  ] as const;
  const CJK = [
    [0x4e00, 0x9fff],
    [0xac00, 0xd7a3],
    [0x3040, 0x30ff],
    [0x20000, 0x2a6df],
  ] as const;
  const FOUR_BYTES = [[0x10000, 0x10ffff]] as const;
  const EMOJI = [
    [0x1f300, 0x1faff],
    [0x1f1e6, 0x1f1ff],
  ] as const;
  const MARKS = [
    [0x300, 0x36f],
    [0x1ab0, 0x1aff],
    [0x20d0, 0x20ff],
  ] as const;
  const ALL = [...ASCII, ...TWO_BYTES, ...THREE_BYTES, ...FOUR_BYTES] as const;
  const emoji = (): string => {
    const parts = Array.from(
      { length: int(1, 4) },
      () => fromRanges(EMOJI, 1) + pick(['', '\u{1f3fb}', '\u{1f3fd}', '\ufe0f']),
    );
    return parts.join(pick(['', '\u200d']));
  };
  const combining = (): string =>
    Array.from({ length: int(1, 8) }, () => pick([...'aeiouAEIOUnzy']) + fromRanges(MARKS, int(1, 4))).join('');
  const generators: readonly (() => string)[] = [
    () => fromRanges(ASCII, int(0, 40)),
    () => fromRanges(TWO_BYTES, int(1, 30)),
    () => fromRanges(THREE_BYTES, int(1, 20)),
    () => fromRanges(CJK, int(1, 20)),
    () => fromRanges(FOUR_BYTES, int(1, 12)),
    emoji,
    combining,
    () => fromRanges(ALL, int(1, 60)),
    () => `customer-${int(0, 10_000_000)}`,
    () => `${pick(['order', 'tenant', 'user'])}:${int(0, 1_000_000)}/${fromRanges(CJK, int(0, 3))}${emoji()}`,
  ];
  const keys = [
    '',
    ' ',
    'NULL',
    'null',
    '"',
    '\\',
    '\\"',
    '{}',
    '{a,b}',
    ',',
    '"{,}"',
    '\t\n\r',
    "'",
    '\u007f',
    '\u0080',
    '\u07ff',
    '\u0800',
    '\uffff',
    '\u{10000}',
    '\u{10ffff}',
    '\u00e9',
    'e\u0301',
    'caf\u00e9',
    'cafe\u0301',
    '\ufeff',
    '\ud800',
    'a\udc00b',
    '\ud83d',
    '\u{1f469}\u200d\u{1f469}\u200d\u{1f467}\u200d\u{1f466}',
    '\u{1f1eb}\u{1f1f7}',
    '\u{1f44d}\u{1f3fd}',
    '日本語',
    '한국어',
    'a'.repeat(1_000),
    'x'.repeat(200_000),
    '日本'.repeat(30_000),
    '\u{1f44d}\u{1f3fd}'.repeat(20_000),
    fromRanges(ALL, 50_000),
    combining().repeat(2_000),
    'é'.repeat(65_536),
  ];
  while (keys.length < count) keys.push(generators[keys.length % generators.length]!());
  return keys;
}

function md5(text: string): string {
  return createHash('md5').update(text, 'utf8').digest('hex');
}

function pgError(error: unknown): pg.DatabaseError {
  assert.ok(error instanceof pg.DatabaseError, `expected a Postgres error, got ${String(error)}`);
  return error;
}

function leaseOf(claimed: ClaimedDelivery): { deliveryId: string; leaseToken: string } {
  return { deliveryId: claimed.id, leaseToken: claimed.leaseToken };
}

describe('publishing from SQL: relaybus_publish and relaybus_lane', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('sql_publish', 8, (opened) => ({ pool, store } = opened));
  const table = (name: string): string => `"${schema}".${name}`;

  /** A bus that registers no handler: its publishes fan out to the subscriptions alone, as relaybus_publish's do. */
  const publisher = () => createRelayBus({ store, events: [Fanout, Ordered, Dedup, DedupOther, OrderPlaced] });

  function publishCall(call: SqlPublish): { text: string; values: unknown[] } {
    const args: string[] = [];
    const values: unknown[] = [];
    const add = (name: string, value: unknown, type: string): void => {
      values.push(value);
      args.push(`${name} => $${values.length}::${type}`);
    };
    add('type', call.type, 'text');
    add('payload', call.payload, 'jsonb');
    if (call.key !== undefined) add('key', call.key, 'text');
    if (call.id !== undefined) add('id', call.id, 'text');
    if (call.headers !== undefined) add('headers', call.headers, 'jsonb');
    if (call.availableAt !== undefined) add('available_at', call.availableAt?.toISOString() ?? null, 'timestamptz');
    if (call.allowNoSubscribers !== undefined) add('allow_no_subscribers', call.allowNoSubscribers, 'boolean');
    return { text: `SELECT ${table('relaybus_publish')}(${args.join(', ')}) AS id`, values };
  }

  async function sqlPublish(client: PgClientLike, call: SqlPublish): Promise<string | null> {
    const { rows } = await client.query(publishCall(call));
    return (rows[0] as { id: string | null }).id;
  }

  /** The error relaybus_publish raises for `call` (the test fails when it returns). */
  async function sqlRefusal(client: PgClientLike, call: SqlPublish): Promise<pg.DatabaseError> {
    let id: string | null;
    try {
      id = await sqlPublish(client, call);
    } catch (error) {
      return pgError(error);
    }
    return assert.fail(`relaybus_publish(${JSON.stringify(call)}) returned ${JSON.stringify(id)} instead of raising`);
  }

  /** Every event and delivery of the schema: "nothing written" means this is unchanged. */
  async function snapshot(client: PgClientLike): Promise<Snapshot> {
    const events = await client.query({
      text: `SELECT id, type, key, payload, headers, handlers FROM ${table('relaybus_events')} ORDER BY id`,
    });
    const deliveries = await client.query({
      text: `SELECT id::text, event_id, handler, lane, key, sequence::text, status, attempts, max_attempts, available_at, last_error
             FROM ${table('relaybus_deliveries')} ORDER BY id`,
    });
    return { events: events.rows, deliveries: deliveries.rows };
  }

  /** A pool client for `fn`; a transaction it left open is rolled back before the client goes back to the pool. */
  async function withClient<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await pool.connect();
    try {
      return await fn(client);
    } finally {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
    }
  }

  /**
   * Claim and complete every delivery of `handlers` as one worker until `expected` were claimed: per handler, in claim
   * order. A keyed delivery is claimable only once the earlier ones of its handler and key are done, so for one key
   * this order is the sequence order.
   */
  async function drain(
    owner: string,
    handlers: readonly string[],
    expected: number,
  ): Promise<Map<string, ClaimedDelivery[]>> {
    const byHandler = new Map<string, ClaimedDelivery[]>(handlers.map((name) => [name, []]));
    let claimed = 0;
    for (let round = 0; round < 200 && claimed < expected; round += 1) {
      const batch = await owners.claim(store, { owner, handlers, limit: 50, leaseDurationMs: 30_000 });
      for (const delivery of batch) byHandler.get(delivery.handler)!.push(delivery);
      claimed += batch.length;
      if (batch.length > 0)
        assert.deepEqual(
          await store.completeMany(batch.map(leaseOf)),
          batch.map(() => true),
        );
    }
    await owners.relinquish(store, owner);
    assert.equal(claimed, expected, `${owner} claimed ${claimed} of ${expected} deliveries`);
    return byHandler;
  }

  it('relaybus_lane equals laneOf on 100,000 keys: unicode of every UTF-8 length, empty, long', {
    timeout: 300_000,
  }, async (t) => {
    const keys = laneKeys(LANE_KEYS);
    const size = Math.ceil(keys.length / LANE_BATCHES);
    const mismatches: string[] = [];
    const lanesSeen = new Set<number>();
    let bytes = 0;
    let sqlMs = 0;
    for (let start = 0; start < keys.length; start += size) {
      const batch = keys.slice(start, start + size);
      const began = performance.now();
      const { rows } = await pool.query<{ ord: number; lane: number; md5: string }>({
        text: `SELECT u.ord::int AS ord, ${table('relaybus_lane')}(u.key) AS lane, md5(u.key) AS md5
               FROM unnest($1::text[]) WITH ORDINALITY AS u(key, ord) ORDER BY u.ord`,
        values: [batch],
      });
      sqlMs += performance.now() - began;
      assert.equal(rows.length, batch.length, 'one row per key');
      rows.forEach((row, index) => {
        const key = batch[index]!;
        bytes += Buffer.byteLength(key, 'utf8');
        assert.equal(row.ord, index + 1);
        // The md5 proves the function hashed the bytes TypeScript hashed (the array transport changed nothing).
        const expected = laneOf(key, 'an-event-id-that-must-not-be-used');
        if (row.md5 !== md5(key) || row.lane !== expected) {
          mismatches.push(
            `key #${start + index} ${JSON.stringify(key.slice(0, 40))} (${key.length} chars): sql lane ${row.lane}, ts lane ${expected}${row.md5 !== md5(key) ? ', bytes differ' : ''}`,
          );
        }
        lanesSeen.add(row.lane);
      });
    }
    t.diagnostic(
      `relaybus_lane: ${keys.length} keys, ${(bytes / 1e6).toFixed(1)} MB of UTF-8, in ${LANE_BATCHES} queries: ` +
        `${Math.round(sqlMs)} ms in Postgres and transport (${((sqlMs * 1000) / keys.length).toFixed(1)} µs a key, ${((sqlMs * 1e6) / bytes).toFixed(0)} ns a byte)`,
    );
    assert.deepEqual(
      mismatches.slice(0, 10),
      [],
      `${mismatches.length} keys get another lane in SQL than in TypeScript`,
    );
    assert.equal(lanesSeen.size, LANE_COUNT, 'the keys cover every lane');
    // STRICT: no key gives no lane (relaybus_publish takes the event id then, as laneOf does).
    const { rows } = await pool.query<{ lane: number | null }>(`SELECT ${table('relaybus_lane')}(NULL) AS lane`);
    assert.equal(rows[0]!.lane, null);
  });

  it('fans out to the active subscriptions and writes what bus.publish writes, and wakes listeners at commit', async () => {
    await store.subscribe([
      { eventType: Fanout.type, handler: 'fan-a', maxAttempts: 3 },
      { eventType: Fanout.type, handler: 'fan-b', maxAttempts: 7, retry: { backoff: { initialDelayMs: 10 } } },
      { eventType: Fanout.type, handler: 'fan-gone', maxAttempts: 2 },
      { eventType: Fanout.type, handler: 'fan-off', maxAttempts: 2 },
      { eventType: 'sqlpub.unrelated', handler: 'fan-other', maxAttempts: 4 },
    ]);
    assert.deepEqual(await store.unsubscribe({ handler: 'fan-gone' }), { removed: 1, buried: 0 });
    // Nothing in the library sets active = false today; both TypeScript publish statements skip such a row, so must this.
    await pool.query(`UPDATE ${table('relaybus_subscriptions')} SET active = false WHERE handler = 'fan-off'`);

    const listener = new pg.Client({ connectionString: 'url' in found ? found.url : '' });
    const notified: string[] = [];
    await listener.connect();
    try {
      listener.on('notification', (message) => notified.push(message.channel));
      await listener.query(`LISTEN "relaybus_${schema}"`);

      const bus = publisher();
      const later = new Date(Date.now() + 3_600_000);
      const payload = { n: 1, note: 'ünïcödé ✓ 日本 👍🏽' };
      const published = await store.transaction(async (tx) => {
        const sqlKeyed = await sqlPublish(tx, {
          type: Fanout.type,
          payload: JSON.stringify(payload),
          key: 'cust-1',
          id: 'fan-sql-keyed',
          headers: '{"trace":"t-1"}',
        });
        const sqlDelayed = await sqlPublish(tx, {
          type: Fanout.type,
          payload: JSON.stringify(payload),
          availableAt: later,
        });
        const tsKeyed = await bus.publish(tx, Fanout, payload, {
          key: 'cust-1',
          id: 'fan-ts-keyed',
          headers: { trace: 't-1' },
        });
        const tsDelayed = await bus.publish(tx, Fanout, payload, { availableAt: later });
        await pause(100);
        assert.deepEqual(notified, [], 'nothing is notified before commit');
        return { sqlKeyed, sqlDelayed, tsKeyed, tsDelayed };
      });
      assert.equal(published.sqlKeyed, 'fan-sql-keyed', 'returns the id it was given');
      assert.match(
        published.sqlDelayed ?? '',
        /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
        'generates a UUID without an id',
      );
      assert.deepEqual(published.tsKeyed.addedHandlers, ['fan-a', 'fan-b']);
      await waitFor(() => notified.length > 0, 'a NOTIFY on the schema channel after commit');
      assert.deepEqual([...new Set(notified)], [`relaybus_${schema}`]);

      const eventsOf = async (ids: readonly string[]) =>
        (
          await pool.query<{
            id: string;
            type: string;
            key: string | null;
            payload: unknown;
            headers: unknown;
            handlers: string[];
          }>(
            // The event as stored: its events row, or (bus.publish without an id: inline) what its deliveries carry.
            `SELECT * FROM (
               SELECT id, type, key, payload, headers, handlers FROM ${table('relaybus_events')} WHERE id = ANY ($1)
               UNION ALL
               SELECT event_id, min(event_type), min(key), (array_agg(payload))[1], (array_agg(headers))[1],
                      array_agg(handler ORDER BY handler)
               FROM ${table('relaybus_deliveries')} WHERE event_id = ANY ($1) AND event_type IS NOT NULL GROUP BY event_id
             ) e ORDER BY array_position($1, id)`,
            [ids],
          )
        ).rows;
      interface DeliveryRow {
        handler: string;
        lane: number;
        key: string | null;
        sequence: string | null;
        status: string;
        attempts: number;
        max_attempts: number;
        claims: number;
        available_at: Date;
        created_at: Date;
      }
      const deliveriesOf = async (id: string) =>
        (
          await pool.query<DeliveryRow>(
            `SELECT handler, lane, key, sequence::text, status, attempts, max_attempts, claims, available_at, created_at
         FROM ${table('relaybus_deliveries')} WHERE event_id = $1 ORDER BY handler`,
            [id],
          )
        ).rows;
      const pairs = [
        [published.sqlKeyed, published.tsKeyed.eventId],
        [published.sqlDelayed!, published.tsDelayed.eventId],
      ] as const;
      for (const [sqlId, tsId] of pairs) {
        const [sqlEvent, tsEvent] = await eventsOf([sqlId, tsId]);
        assert.deepEqual(
          { ...sqlEvent, id: undefined },
          { ...tsEvent, id: undefined },
          `event ${sqlId} from SQL is stored as ${tsId} from TypeScript`,
        );
        assert.deepEqual(sqlEvent!.handlers, ['fan-a', 'fan-b'], 'only the active subscriptions of the type');
        const [fromSql, fromTs] = [await deliveriesOf(sqlId), await deliveriesOf(tsId)];
        const comparable = (rows: typeof fromSql, id: string) =>
          rows.map(({ sequence, created_at: createdAt, available_at: availableAt, lane, ...row }) => {
            assert.equal(lane, laneOf(row.key, id), `the lane of ${id} is laneOf(key, id)`);
            // created_at is the transaction's now(); both publishes ran in one transaction.
            return {
              ...row,
              keyed: sequence !== null,
              due: availableAt.getTime() === createdAt.getTime() ? 'now' : availableAt.toISOString(),
            };
          });
        assert.deepEqual(comparable(fromSql, sqlId), comparable(fromTs, tsId));
      }
      const keyed = await deliveriesOf('fan-sql-keyed');
      assert.deepEqual(
        keyed.map((d) => [d.handler, d.max_attempts, d.lane, d.status, d.attempts]),
        [
          ['fan-a', 3, laneOf('cust-1', 'x'), 'pending', 0],
          ['fan-b', 7, laneOf('cust-1', 'x'), 'pending', 0],
        ],
        'attempt budgets come from the subscriptions',
      );
      assert.equal(
        (await deliveriesOf(published.sqlDelayed!))[0]!.available_at.getTime(),
        later.getTime(),
        'available_at is kept',
      );

      // Claimed like any delivery: headers and payload as published; the delayed ones are not due.
      const byHandler = await drain('fan-worker', ['fan-a', 'fan-b'], 4);
      assert.deepEqual(
        await owners.claim(store, {
          owner: 'fan-worker',
          handlers: ['fan-a', 'fan-b'],
          limit: 50,
          leaseDurationMs: 30_000,
        }),
        [],
        'the delayed ones are not due',
      );
      await owners.relinquish(store, 'fan-worker');
      const claimed = [...byHandler.values()].flat();
      assert.deepEqual(claimed.map((d) => d.eventId).sort(), [
        'fan-sql-keyed',
        'fan-sql-keyed',
        'fan-ts-keyed',
        'fan-ts-keyed',
      ]);
      for (const delivery of claimed) {
        assert.deepEqual(delivery.payload, payload);
        assert.deepEqual(delivery.headers, { trace: 't-1' });
        assert.equal(delivery.eventType, Fanout.type);
      }
    } finally {
      await listener.end();
    }
  });

  it('orders one key by commit: SQL and TypeScript publishes interleaved in two transactions that commit in reverse start order', {
    timeout: 60_000,
  }, async (t) => {
    await store.subscribe([
      { eventType: Ordered.type, handler: 'ord-a', maxAttempts: 3 },
      { eventType: Ordered.type, handler: 'ord-b', maxAttempts: 3 },
    ]);
    const bus = publisher();
    const publishAs = async (tx: PgClientLike, kind: Kind, key: string, id: string): Promise<void> => {
      if (kind === 'sql')
        assert.equal(await sqlPublish(tx, { type: Ordered.type, payload: JSON.stringify({ step: id }), key, id }), id);
      else
        assert.deepEqual((await bus.publish(tx, Ordered, { step: id }, { key, id })).addedHandlers, ['ord-a', 'ord-b']);
    };
    const waitingForLock = async (pid: number): Promise<boolean> =>
      (
        await pool.query<{ waiting: boolean }>(
          "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted) AS waiting",
          [pid],
        )
      ).rows[0]!.waiting;

    /**
     * A begins first (it has a transaction id before B), B publishes the key, then A publishes it and must wait for B's
     * key lock; B publishes twice more and commits, then A goes on. The lock holder publishes with `holder` first.
     */
    const round = async (key: string, holder: Kind): Promise<string[]> => {
      const other: Kind = holder === 'sql' ? 'ts' : 'sql';
      const id = (name: string): string => `${key}-${name}`;
      const aStarted = deferred<{ pid: number; xid: bigint }>();
      const bHoldsKey = deferred();
      const aSeenWaiting = deferred();
      const commits: string[] = [];
      let txB: Promise<void> | undefined;
      const txA = store
        .transaction(async (tx) => {
          const { rows } = await tx.query({ text: 'SELECT pg_backend_pid() AS pid, txid_current()::text AS xid' });
          const row = rows[0] as { pid: number; xid: string };
          aStarted.resolve({ pid: row.pid, xid: BigInt(row.xid) });
          await bHoldsKey.promise;
          await publishAs(tx, other, key, id('A1')); // blocks until B commits
          await txB; // B's commit is acknowledged before A commits: the recorded order is the server's
          await publishAs(tx, holder, key, id('A2'));
          await publishAs(tx, other, key, id('A3'));
        })
        .then(() => {
          commits.push('A');
        });
      const a = await aStarted.promise;
      let bXid = 0n;
      txB = store
        .transaction(async (tx) => {
          const { rows } = await tx.query({ text: 'SELECT txid_current()::text AS xid' });
          bXid = BigInt((rows[0] as { xid: string }).xid);
          await publishAs(tx, holder, key, id('B1'));
          bHoldsKey.resolve();
          await aSeenWaiting.promise;
          await publishAs(tx, other, key, id('B2'));
          await publishAs(tx, holder, key, id('B3'));
        })
        .then(() => {
          commits.push('B');
        });
      txB.catch((error: unknown) => {
        bHoldsKey.reject(error);
      });
      await waitFor(
        () => waitingForLock(a.pid),
        `A's publish of ${key} (${other}) waits for the key lock B's ${holder} publish holds`,
        10_000,
      );
      aSeenWaiting.resolve();
      await Promise.all([txA, txB]);
      assert.ok(a.xid < bXid, `A started first (xid ${a.xid} < ${bXid})`);
      assert.deepEqual(commits, ['B', 'A'], 'B committed first');
      t.diagnostic(
        `${key}: A (xid ${a.xid}) started first and waited on B's ${holder} key lock with a ${other} publish; B (xid ${bXid}) committed first`,
      );
      return ['B1', 'B2', 'B3', 'A1', 'A2', 'A3'].map(id);
    };

    const expected = new Map([
      ['ord-k1', await round('ord-k1', 'sql')],
      ['ord-k2', await round('ord-k2', 'ts')],
    ]);
    const byHandler = await drain('ord-worker', ['ord-a', 'ord-b'], 2 * 12);
    for (const [handler, deliveries] of byHandler) {
      for (const [key, ids] of expected) {
        const ofKey = deliveries.filter((d) => d.key === key);
        assert.deepEqual(
          ofKey.map((d) => d.eventId),
          ids,
          `${handler} ran ${key} in commit order`,
        );
        const sequences = ofKey.map((d) => BigInt(d.sequence!));
        assert.ok(
          sequences.every((s, i) => i === 0 || s > sequences[i - 1]!),
          `${handler}: ${key}'s sequences increase: ${sequences.join(', ')}`,
        );
        assert.deepEqual(
          [...new Set(ofKey.map((d) => d.lane))],
          [laneOf(key, 'x')],
          `every delivery of ${key} is in laneOf(key)`,
        );
      }
    }
  });

  it('dedup: an id published again gets only handlers it never had; another type, key or payload is 23505 and writes nothing', async () => {
    const id = 'dd-event';
    const payload = '{"n": 1, "tags": ["a", "b"]}';
    const same: SqlPublish = { type: Dedup.type, payload, key: 'dd-key', id };
    await store.subscribe([
      { eventType: Dedup.type, handler: 'dd-1', maxAttempts: 3 },
      { eventType: DedupOther.type, handler: 'dd-other', maxAttempts: 3 },
    ]);
    const handlersOf = async () =>
      (await pool.query<{ handlers: string[] }>(`SELECT handlers FROM ${table('relaybus_events')} WHERE id = $1`, [id]))
        .rows[0]?.handlers;
    const pendingOf = async () =>
      (
        await pool.query<{ handler: string }>(
          `SELECT handler FROM ${table('relaybus_deliveries')} WHERE event_id = $1 AND status = 'pending' ORDER BY id`,
          [id],
        )
      ).rows.map((r) => r.handler);

    assert.equal(await sqlPublish(pool, same), id);
    assert.deepEqual(await pendingOf(), ['dd-1']);
    // dd-1 completes: its delivery row is deleted, but the event remembers it had dd-1.
    const first = await drain('dd-worker', ['dd-1'], 1);
    assert.deepEqual(
      first.get('dd-1')!.map((d) => d.eventId),
      [id],
    );
    await store.subscribe([{ eventType: Dedup.type, handler: 'dd-2', maxAttempts: 3 }]);

    // Again, the payload's keys in another order (jsonb equality): only dd-2 is new.
    assert.equal(await sqlPublish(pool, { ...same, payload: '{"tags": ["a", "b"], "n": 1}' }), id);
    assert.deepEqual(
      await pendingOf(),
      ['dd-2'],
      'a delivery for the new handler only; the completed dd-1 is not run again',
    );
    assert.deepEqual(await handlersOf(), ['dd-1', 'dd-2']);
    const settled = await snapshot(pool);
    assert.equal(await sqlPublish(pool, same), id, 'the identical event again is no error');
    assert.deepEqual(await snapshot(pool), settled, 'and adds nothing');
    // The TypeScript path sees the SQL-published event as the same one.
    const again = await store.transaction((tx) =>
      publisher().publish(tx, Dedup, { n: 1, tags: ['a', 'b'] }, { key: 'dd-key', id }),
    );
    assert.deepEqual({ duplicate: again.duplicate, added: again.addedHandlers }, { duplicate: true, added: [] });
    await assert.rejects(
      store.transaction((tx) => publisher().publish(tx, Dedup, { n: 2, tags: [] }, { key: 'dd-key', id })),
      EventConflictError,
    );
    assert.deepEqual(await snapshot(pool), settled);

    const conflicts: readonly [string, SqlPublish][] = [
      ['payload', { ...same, payload: '{"n": 2, "tags": ["a", "b"]}' }],
      ['payload (array order counts)', { ...same, payload: '{"n": 1, "tags": ["b", "a"]}' }],
      ['type', { ...same, type: DedupOther.type, payload: '{"n": 1}' }],
      ['key', { ...same, key: 'another-key' }],
      ['key (none)', { ...same, key: null }],
    ];
    for (const [what, call] of conflicts) {
      await withClient(async (client) => {
        await client.query('BEGIN');
        // A write of the caller's own before the failing call: it must survive the rollback to the savepoint.
        assert.equal(
          await sqlPublish(client, { type: Dedup.type, payload: '{"n": 0, "tags": []}', id: `dd-before-${what}` }),
          `dd-before-${what}`,
        );
        const before = await snapshot(client);
        await client.query('SAVEPOINT conflict');
        const error = await sqlRefusal(client, call);
        assert.equal(error.code, '23505', `${what}: ${error.message}`);
        assert.match(
          error.message,
          /event id "dd-event" exists with another type, key or payload \(stored type "sqlpub\.dedup", key "dd-key"\)/,
          what,
        );
        await client.query('ROLLBACK TO SAVEPOINT conflict');
        assert.deepEqual(await snapshot(client), before, `${what}: nothing written`);
        await client.query('COMMIT');
      });
      const after = await snapshot(pool);
      assert.deepEqual(
        after.events.filter((e) => (e as { id: string }).id === id),
        settled.events.filter((e) => (e as { id: string }).id === id),
        `${what}: the stored event is unchanged`,
      );
      assert.deepEqual(await pendingOf(), ['dd-2'], `${what}: no delivery added`);
    }
  });

  it('bad input: no subscription (P0002), NULL payload (22004), NULL or empty type and non-object headers (22023) write nothing', async () => {
    const BAD = 'sqlpub.bad';
    const INACTIVE = 'sqlpub.inactive';
    await store.subscribe([{ eventType: BAD, handler: 'bad-h', maxAttempts: 3 }]);
    const refusals: readonly [string, SqlPublish, string, RegExp][] = [
      [
        'a type without subscription',
        { type: 'sqlpub.nobody', payload: '{}' },
        'P0002',
        /event type "sqlpub\.nobody" has no subscription.*allow_no_subscribers => true/s,
      ],
      [
        'an inactive subscription only',
        { type: INACTIVE, payload: '{}', key: 'k' },
        'P0002',
        /event type "sqlpub\.inactive" has no subscription/,
      ],
      ['a NULL payload', { type: BAD, payload: null }, '22004', /payload must not be NULL/],
      ['a NULL type', { type: null, payload: '{}' }, '22023', /type must be a non-empty text/],
      ['an empty type', { type: '', payload: '{}' }, '22023', /type must be a non-empty text/],
      ['array headers', { type: BAD, payload: '{}', headers: '["a"]' }, '22023', /headers must be a JSON object/],
      ['string headers', { type: BAD, payload: '{}', headers: '"a"' }, '22023', /headers must be a JSON object/],
      ['NULL headers', { type: BAD, payload: '{}', headers: null }, '22023', /headers must be a JSON object/],
    ];
    await store.subscribe([{ eventType: INACTIVE, handler: 'inactive-h', maxAttempts: 3 }]);
    await pool.query(`UPDATE ${table('relaybus_subscriptions')} SET active = false WHERE handler = 'inactive-h'`);

    for (const [what, call, code, message] of refusals) {
      // In a transaction: the savepoint keeps the caller's earlier write, and nothing of the failed call is left.
      await withClient(async (client) => {
        await client.query('BEGIN');
        const mine = await sqlPublish(client, { type: BAD, payload: '{"mine": true}' });
        const before = await snapshot(client);
        await client.query('SAVEPOINT bad');
        const error = await sqlRefusal(client, call);
        assert.equal(error.code, code, `${what}: ${error.message}`);
        assert.match(error.message, message, what);
        await assert.rejects(
          client.query('SELECT 1'),
          (e: unknown) => pgError(e).code === '25P02',
          `${what}: the error aborted the transaction`,
        );
        await client.query('ROLLBACK TO SAVEPOINT bad');
        assert.deepEqual(await snapshot(client), before, `${what}: nothing written`);
        await client.query('COMMIT');
        assert.equal(
          (
            await pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM ${table('relaybus_events')} WHERE id = $1`,
              [mine],
            )
          ).rows[0]!.n,
          1,
          `${what}: the caller's own write committed`,
        );
      });
      // On its own (autocommit), then seen from a fresh transaction.
      const before = await snapshot(pool);
      const error = await sqlRefusal(pool, call);
      assert.equal(error.code, code);
      assert.deepEqual(await snapshot(pool), before, `${what} (autocommit): nothing written`);
    }

    // allow_no_subscribers: NULL, nothing written, the transaction goes on.
    await withClient(async (client) => {
      await client.query('BEGIN');
      const before = await snapshot(client);
      assert.equal(
        await sqlPublish(client, {
          type: 'sqlpub.nobody',
          payload: '{}',
          key: 'k',
          id: 'nobody-1',
          allowNoSubscribers: true,
        }),
        null,
      );
      assert.deepEqual(await snapshot(client), before, 'allow_no_subscribers: nothing written');
      await client.query('COMMIT');
    });
    assert.equal(
      (
        await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${table('relaybus_events')} WHERE type = 'sqlpub.nobody'`,
        )
      ).rows[0]!.n,
      0,
    );
    // It only relaxes the missing subscription: other checks still apply.
    assert.equal(
      (await sqlRefusal(pool, { type: 'sqlpub.nobody', payload: null, allowNoSubscribers: true })).code,
      '22004',
    );
  });

  it('refuses, like bus.publish, empty or over-long ids and keys, non-string header values and dates outside years 1-9999', {}, async () => {
    const BAD = 'sqlpub.bad';
    const cases: readonly [string, { text: string; values: unknown[] }][] = [
      ['an empty key', publishCall({ type: BAD, payload: '{}', key: '' })],
      ['an empty id', publishCall({ type: BAD, payload: '{}', id: '' })],
      ['a 201-character key', publishCall({ type: BAD, payload: '{}', key: 'k'.repeat(201) })],
      ['a 201-character id', publishCall({ type: BAD, payload: '{}', id: 'i'.repeat(201) })],
      ['a number header', publishCall({ type: BAD, payload: '{}', headers: '{"attempt": 1}' })],
      ['an object header', publishCall({ type: BAD, payload: '{}', headers: '{"meta": {"a": "b"}}' })],
      [
        'available_at infinity',
        { text: `SELECT ${table('relaybus_publish')}($1, '{}', available_at => 'infinity') AS id`, values: [BAD] },
      ],
      [
        'available_at in year 10000',
        {
          text: `SELECT ${table('relaybus_publish')}($1, '{}', available_at => '10000-01-01T00:00:00Z') AS id`,
          values: [BAD],
        },
      ],
    ];
    const outcomes: string[] = [];
    await withClient(async (client) => {
      await client.query('BEGIN');
      for (const [what, query] of cases) {
        await client.query('SAVEPOINT gap');
        try {
          await client.query(query);
          outcomes.push(`${what}: accepted`);
        } catch (error) {
          outcomes.push(`${what}: ${pgError(error).code}`);
        }
        await client.query('ROLLBACK TO SAVEPOINT gap');
      }
    });
    assert.deepEqual(
      outcomes,
      cases.map(([what]) => `${what}: 22023`),
    );
  });

  it("the README's trigger publishes each inserted order in the insert's transaction, and a running bus delivers it", {
    timeout: 60_000,
  }, async (t) => {
    const block = fileBlock(README_TRIGGER);
    assert.equal(block.lang, 'sql');
    assert.equal(
      block.code.match(/\brelaybus\.relaybus_publish\(/g)?.length,
      1,
      'the README calls relaybus.relaybus_publish (the default schema) once',
    );
    // The README's SQL as written, on this test's schema: its unqualified names resolve there through search_path.
    const triggerSql = block.code.replace(/\brelaybus\.relaybus_publish\(/, `${table('relaybus_publish')}(`);
    await pool.query(`CREATE TABLE ${table('orders')} (id text PRIMARY KEY, customer_id text NOT NULL)`);
    await withClient(async (client) => {
      await client.query('BEGIN');
      await client.query(`SET LOCAL search_path TO "${schema}"`);
      await client.query(triggerSql);
      await client.query('COMMIT');
    });
    const order = (id: string) =>
      pool
        .query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table('orders')} WHERE id = $1`, [id])
        .then((r) => r.rows[0]!.n);
    const eventOf = (client: PgClientLike, id: string) =>
      client
        .query({ text: `SELECT type, key, payload FROM ${table('relaybus_events')} WHERE id = $1`, values: [id] })
        .then((r) => r.rows[0]);

    // No worker of order.placed has started yet: the INSERT fails, as the README says.
    const refused = await pool
      .query(`INSERT INTO ${table('orders')} (id, customer_id) VALUES ('o-0', 'c-0')`)
      .then(() => undefined, pgError);
    assert.equal(refused?.code, 'P0002');
    assert.match(refused?.message ?? '', /"order\.placed"/);
    assert.equal(await order('o-0'), 0, 'the order was not inserted either');

    const runs: {
      orderId: string;
      customerId: string;
      eventId: string;
      key: string | null;
      sequence: string | null;
      at: number;
    }[] = [];
    // A 30 s poll: only the NOTIFY relaybus_publish sends at commit explains a delivery within a few seconds.
    const bus = createRelayBus({ store, events: [OrderPlaced], dispatcher: { pollIntervalMs: 30_000 } });
    bus.on(OrderPlaced, 'send-receipt', { maxAttempts: 5 }, (payload, ctx) => {
      runs.push({
        ...payload,
        eventId: ctx.delivery.eventId,
        key: ctx.delivery.key,
        sequence: ctx.delivery.sequence,
        at: performance.now(),
      });
    });
    await bus.start();
    try {
      assert.ok(
        (await store.listSubscriptions()).some((s) => s.eventType === OrderPlaced.type && s.handler === 'send-receipt'),
        'the started bus recorded its subscription',
      );

      // Rolled back: the event goes with the order.
      await withClient(async (client) => {
        await client.query('BEGIN');
        await client.query(`INSERT INTO ${table('orders')} (id, customer_id) VALUES ('o-rb', 'c-7')`);
        assert.deepEqual(
          await eventOf(client, 'order-o-rb'),
          { type: 'order.placed', key: 'c-7', payload: { orderId: 'o-rb', customerId: 'c-7' } },
          "published in the insert's transaction",
        );
        assert.equal(await eventOf(pool, 'order-o-rb'), undefined, 'invisible to others before commit');
        await client.query('ROLLBACK');
      });
      assert.equal(await eventOf(pool, 'order-o-rb'), undefined, 'a rolled-back insert leaves no event');

      // Committed, with the quick start's bus.publish of the same order in the same transaction: one delivery.
      let committedAt = 0;
      await withClient(async (client) => {
        await client.query('BEGIN');
        await client.query(`INSERT INTO ${table('orders')} (id, customer_id) VALUES ('o-1', 'c-7')`);
        const both = await bus.publish(
          client,
          OrderPlaced,
          { orderId: 'o-1', customerId: 'c-7' },
          { key: 'c-7', id: 'order-o-1' },
        );
        assert.deepEqual(
          { duplicate: both.duplicate, added: both.addedHandlers },
          { duplicate: true, added: [] },
          'the trigger published it already',
        );
        await client.query('COMMIT');
        committedAt = performance.now();
      });
      await waitFor(() => runs.length >= 1, 'the handler runs the order the trigger published', 5_000);
      t.diagnostic(`delivered ${Math.round(runs[0]!.at - committedAt)} ms after commit (poll interval 30 s)`);

      // Several rows of one customer in one statement: one event each, delivered in row order.
      await pool.query(
        `INSERT INTO ${table('orders')} (id, customer_id) VALUES ('o-2', 'c-8'), ('o-3', 'c-8'), ('o-4', 'c-8')`,
      );
      await waitFor(() => runs.length >= 4, 'the three orders of c-8 delivered', 10_000);
      await pause(200);
      assert.deepEqual(
        runs.map(({ orderId, customerId, eventId, key }) => ({ orderId, customerId, eventId, key })),
        [
          { orderId: 'o-1', customerId: 'c-7', eventId: 'order-o-1', key: 'c-7' },
          { orderId: 'o-2', customerId: 'c-8', eventId: 'order-o-2', key: 'c-8' },
          { orderId: 'o-3', customerId: 'c-8', eventId: 'order-o-3', key: 'c-8' },
          { orderId: 'o-4', customerId: 'c-8', eventId: 'order-o-4', key: 'c-8' },
        ],
        'each committed order once, with its payload, in row order per customer; never the rolled-back one',
      );
      const sequences = runs.slice(1).map((run) => BigInt(run.sequence!));
      assert.ok(
        sequences[0]! < sequences[1]! && sequences[1]! < sequences[2]!,
        `row order is key order: ${sequences.join(', ')}`,
      );
      const { rows: left } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${table('relaybus_deliveries')} WHERE handler = 'send-receipt'`,
      );
      assert.equal(left[0]!.n, 0, 'no delivery left: none pending, none dead');
    } finally {
      await bus.stop();
    }
  });

  it('a worker buries a delivery whose SQL-published payload fails its schema, with the validation error, and keeps running', {
    timeout: 60_000,
  }, async (t) => {
    const logged: string[] = [];
    const logger: Logger = {
      debug: () => {},
      info: () => {},
      warn: (message, fields) => logged.push(`warn ${message} ${JSON.stringify(fields?.error ?? '')}`),
      error: (message, fields) => logged.push(`error ${message} ${JSON.stringify(fields?.error ?? '')}`),
    };
    const bad: unknown[] = [];
    const good: string[] = [];
    const bus = createRelayBus({ store, events: [OrderPlaced], logger, dispatcher: { pollIntervalMs: 100 } });
    bus.on(
      OrderPlaced,
      'send-receipt',
      { maxAttempts: 2, backoff: { initialDelayMs: 50, maxDelayMs: 50, jitter: 0 } },
      (order) => {
        if (order.orderId === undefined) bad.push(order);
        good.push(order.orderId.trim()); // what a handler trusting its payload type does
      },
    );
    await bus.start();
    try {
      // What to_jsonb(NEW) of an orders row publishes: the row's shape, not the event's.
      const rowShaped = '{"id": "o-9", "customer_id": "c-9"}';
      assert.equal(
        await store.transaction((tx) =>
          sqlPublish(tx, { type: OrderPlaced.type, payload: rowShaped, key: 'c-9', id: 'row-o-9' }),
        ),
        'row-o-9',
      );
      const outcome = async () =>
        (
          await pool.query<{ status: string; attempts: number; last_error: string | null }>(
            `SELECT status, attempts, last_error FROM ${table('relaybus_deliveries')} WHERE event_id = 'row-o-9'`,
          )
        ).rows[0];
      await waitFor(
        async () => (await outcome())?.status !== 'pending',
        'the delivery of the bad payload leaves pending',
        20_000,
      );
      const row = await outcome();
      // Still running: the next good event is delivered.
      await store.transaction((tx) =>
        sqlPublish(tx, {
          type: OrderPlaced.type,
          payload: '{"orderId": "o-10", "customerId": "c-9"}',
          key: 'c-9',
          id: 'order-o-10',
        }),
      );
      await waitFor(() => good.includes('o-10'), 'the worker delivers the next event', 10_000);
      assert.equal(bus.state, 'running');
      assert.equal(bus.health().ready, true);

      t.diagnostic(
        `bad payload: delivery ${JSON.stringify(row ?? 'deleted (completed)')}; handler ran ${bad.length} times with it; worker logged ${JSON.stringify(logged)}`,
      );
      assert.equal(
        bad.length,
        0,
        `the handler never runs with a payload that fails the schema (it ran ${bad.length} times with ${JSON.stringify(bad[0])})`,
      );
      assert.equal(row?.status, 'dead', 'the delivery is dead');
      assert.equal(row.attempts, 1, 'at once: no retry can fix a payload');
      assert.match(row.last_error ?? '', /order\.placed/);
      assert.match(row.last_error ?? '', /\/orderId/, 'the last error is the validation error, naming the path');
    } finally {
      await bus.stop();
    }
  });
});
