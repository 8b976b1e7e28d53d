import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  createRelayBus,
  defineEvent,
  InvalidInputError,
  InvalidOptionsError,
  memoryStore,
  Type,
  UnknownHandlerError,
} from '../../src/index.js';

const Ping = defineEvent('ping', Type.Object({ n: Type.Integer() }));

function makeBus() {
  const store = memoryStore();
  const bus = createRelayBus({ store, events: [Ping], dispatcher: { pollIntervalMs: 5 } });
  const ran: string[] = [];
  for (const name of ['a', 'b', 'c'])
    bus.on(Ping, name, () => {
      ran.push(name);
    });
  return { bus, store, ran };
}

describe('bus.start(options)', () => {
  it('lists the registered handlers', () => assert.deepEqual(makeBus().bus.handlers, ['a', 'b', 'c']));

  it('runs only the chosen handlers; the others stay pending', async () => {
    const { bus, store, ran } = makeBus();
    await store.transaction((tx) => bus.publish(tx, Ping, { n: 1 }));
    await bus.start({ handlers: ['b'], dispatcher: { concurrency: 2 } });
    for (let i = 0; i < 100 && ran.length === 0; i += 1) await new Promise((resolve) => setTimeout(resolve, 5));
    await bus.stop();
    assert.deepEqual(ran, ['b']);
    const stats = await store.statistics();
    assert.equal(stats.handlers.a?.pending, 1);
    assert.equal(stats.handlers.c?.pending, 1);
  });

  it('rejects unknown handlers, an empty list and invalid dispatcher options before starting', async () => {
    const { bus } = makeBus();
    await assert.rejects(
      bus.start({ handlers: ['nope'] }),
      (e: unknown) =>
        e instanceof UnknownHandlerError && /"nope" is not registered; this bus has a, b, c/.test(e.message),
    );
    await assert.rejects(bus.start({ handlers: [] }), InvalidInputError);
    await assert.rejects(
      bus.start({ dispatcher: { concurrency: 0 } }),
      (e: unknown) => e instanceof InvalidOptionsError && /dispatcher.concurrency/.test(e.message),
    );
    assert.equal(bus.state, 'idle');
    await bus.start({ dispatcher: { batchSize: 3 } });
    await bus.stop();
  });
});
