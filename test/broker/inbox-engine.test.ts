/**
 * The broker-neutral inbox engine on the in-memory store (no broker, no database: always runs):
 * per-key order under concurrent batches and slow, failing transactions; ack only after the commit;
 * a conflict dead-letters only its message; a failing store is retried in place and, on a stop,
 * the held messages are requeued, never acked; messages of a lost connection are never settled.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createRelayBus, defineEvent, memoryStore, StoreUnavailableError, Type } from '../../src/index.js';
import { TypedEmitter } from '../../src/core/emitter.js';
import { noopLogger } from '../../src/core/logger.js';
import { RetryBackoff } from '../../src/core/retry-backoff.js';
import { InboxEngine, type HeldMessage } from '../../src/broker/inbox-engine.js';
import type { InboxEventMap } from '../../src/broker/inbox-types.js';
import { defaultMapper } from '../../src/broker/broker-message.js';
import type { MemoryTransaction } from '../../src/memory/memory-store.js';
import type { Store } from '../../src/store/contract.js';
import { spyStore } from '../support/wait.js';

const ItemCreated = defineEvent('item.created', Type.Object({ n: Type.Integer() }, { additionalProperties: false }));
const fastRetry = () => new RetryBackoff({ initialDelayMs: 1, maxDelayMs: 5, multiplier: 2, jitter: 0 });

interface Probe {
  readonly log: string[];
  held(n: number, options?: { key?: string | null; id?: string; body?: string }): HeldMessage;
}

function probe(): Probe {
  const log: string[] = [];
  return {
    log,
    held(n, options = {}) {
      const id = options.id ?? `m-${n}`;
      const key = options.key === undefined ? `k-${n % 3}` : options.key;
      return {
        message: {
          id,
          type: ItemCreated.type,
          key,
          headers: {},
          body: Buffer.from(options.body ?? JSON.stringify({ n })),
          redelivered: false,
          source: 'test',
        },
        ack: () => void log.push(`ack ${id}`),
        requeue: () => void log.push(`requeue ${id}`),
        deadLetter: async (reason) => void log.push(`dead ${id} ${reason}`),
      };
    },
  };
}

function setup(
  wrap: (store: Store<MemoryTransaction>) => Partial<Store<MemoryTransaction>> = () => ({}),
  options: { batchSize?: number; concurrency?: number } = {},
) {
  const base = memoryStore();
  // The memory store, with the methods `wrap` replaces (the rest bound to it).
  const { store } = spyStore(base, wrap(base));
  const bus = createRelayBus({ store, events: [ItemCreated] });
  bus.on(ItemCreated, 'h', async () => {});
  const emitter = new TypedEmitter<InboxEventMap>(() => noopLogger);
  const committed: string[] = [];
  emitter.on('committed', ({ messages }) =>
    committed.push(...messages.map((m) => `${m.id}${m.duplicate ? ' dup' : ''}`)),
  );
  const engine = new InboxEngine({
    bus,
    map: defaultMapper([ItemCreated]),
    batchSize: options.batchSize ?? 4,
    concurrency: options.concurrency ?? 3,
    logger: noopLogger,
    emitter,
    retry: fastRetry(),
  });
  return { base, bus, engine, committed };
}

describe('inbox engine', () => {
  it('keeps each key in arrival order across concurrent batches with slow and failing transactions, and acks only after the commit', async () => {
    let calls = 0;
    const { base, engine, committed } = setup((store) => ({
      async transaction(fn) {
        calls += 1;
        const call = calls;
        await new Promise((resolve) => setTimeout(resolve, (call * 7) % 5));
        if (call % 4 === 0) throw new StoreUnavailableError('injected', { retryable: true });
        return store.transaction(fn);
      },
    }));
    const p = probe();
    for (let n = 0; n < 60; n += 1) engine.push(p.held(n));
    await engine.waitIdle();
    assert.equal(p.log.filter((line) => line.startsWith('ack')).length, 60);
    // Acks come after their commit.
    for (const line of p.log) assert.ok(committed.includes(line.slice(4)), `${line} after its commit`);
    // Per key, the store's key sequences follow n.
    const page = await base.listDeliveries({ limit: 100 });
    const byKey = new Map<string, { n: number; sequence: number }[]>();
    for (const delivery of page.items) {
      const n = Number(delivery.eventId.slice(2));
      const list = byKey.get(delivery.key!) ?? [];
      list.push({ n, sequence: Number(delivery.sequence) });
      byKey.set(delivery.key!, list);
    }
    for (const [key, list] of byKey) {
      const byN = [...list].sort((a, b) => a.n - b.n).map((x) => x.sequence);
      assert.deepEqual(
        byN,
        [...byN].sort((a, b) => a - b),
        `key ${key} in arrival order`,
      );
    }
    assert.ok(calls > 15, 'several transactions failed and were retried');
  });

  it('dead-letters a conflicting id alone and commits the rest of its batch; a same-id duplicate adds nothing', async () => {
    const { engine, committed } = setup(undefined, { batchSize: 10, concurrency: 1 });
    const p = probe();
    engine.push(p.held(1, { key: null }));
    await engine.waitIdle();
    for (const n of [2, 3]) engine.push(p.held(n, { key: null }));
    engine.push(p.held(4, { key: null, id: 'm-1' })); // same id, other payload
    engine.push(p.held(1, { key: null })); // same id, same payload: a redelivery
    engine.push(p.held(5, { key: null, body: '{"n":"x"}' }));
    engine.push(p.held(6, { key: null, id: '' }));
    await engine.waitIdle();
    assert.deepEqual(p.log.filter((line) => line.startsWith('dead')).sort(), [
      'dead  missing-id',
      'dead m-1 conflict',
      'dead m-5 invalid-payload',
    ]);
    assert.ok(committed.includes('m-1 dup'));
    assert.deepEqual(committed.filter((id) => !id.endsWith('dup')).sort(), ['m-1', 'm-2', 'm-3']);
  });

  it('retries a failing store in place and, when stopped, requeues what it held: nothing acked without a commit', async () => {
    const { engine } = setup(() => ({
      transaction: () => Promise.reject(new StoreUnavailableError('down', { retryable: true })),
    }));
    const p = probe();
    for (let n = 0; n < 5; n += 1) engine.push(p.held(n));
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(p.log.length, 0, 'held while the store fails');
    await engine.drain(0);
    assert.deepEqual(
      p.log.map((line) => line.split(' ')[0]),
      ['requeue', 'requeue', 'requeue', 'requeue', 'requeue'],
    );
    engine.push(p.held(9));
    await engine.waitIdle();
    assert.equal(p.log.at(-1), 'requeue m-9', 'a stopped engine takes nothing');
  });

  it('settles nothing of a lost connection: the broker redelivers those messages', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const { engine, committed } = setup(
      (store) => ({
        async transaction(fn) {
          await gate;
          return store.transaction(fn);
        },
      }),
      { batchSize: 2, concurrency: 1 },
    );
    const p = probe();
    for (let n = 0; n < 6; n += 1) engine.push(p.held(n, { key: 'same' }));
    await new Promise((resolve) => setTimeout(resolve, 10));
    engine.orphanAll();
    release();
    await engine.waitIdle();
    assert.deepEqual(p.log, [], 'no ack, requeue or dead letter on a dead channel');
    assert.ok(committed.length <= 2, 'only the batch already running committed');
  });
});
