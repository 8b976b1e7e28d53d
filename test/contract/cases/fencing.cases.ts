/**
 * Fencing: a lease token `lane:epoch:claims` only works while the lane has that epoch, lists the
 * delivery in flight, and the delivery's claims counter is unchanged. A stale write returns false
 * and changes nothing (proved by re-reading the row); a malformed token throws.
 */
import assert from 'node:assert/strict';
import type { ClaimedDelivery, DeliveryLease, Store } from '../../../src/store/contract.js';
import type { Harness } from '../../support/harness.js';
import {
  claim,
  claimExpecting,
  claimsOf,
  epochOf,
  event,
  H1,
  H2,
  handlers,
  leaseOf,
  mutableFields,
  PAST_LEASE_MS,
  publish,
  rejectsWithCode,
  viewOf,
  type CaseGroup,
  type ContractCase,
} from './kit.js';

/** Publish e1, claim it as w1, let the lease expire, take it over as w2. Returns both claims. */
async function takenOver<TTx>(harness: Harness<TTx>): Promise<{ stale: ClaimedDelivery; current: ClaimedDelivery }> {
  await publish(harness, [event({ id: 'e1' })]);
  const [stale] = await claimExpecting(harness, 'w1', ['e1']);
  harness.clock.advance(PAST_LEASE_MS);
  const [current] = await claimExpecting(harness, 'w2', ['e1']);
  return { stale: stale!, current: current! };
}

type StaleWrite = <TTx>(harness: Harness<TTx>, lease: DeliveryLease) => Promise<boolean>;

const staleWrites: Record<string, StaleWrite> = {
  'complete it (completeMany)': async (h, lease) => (await h.store.completeMany([lease], h.clock.now()))[0]!,
  'reschedule it': (h, lease) =>
    h.store.reschedule(lease, {
      availableAt: new Date(h.clock.now().getTime() + 60_000),
      error: 'stale',
      now: h.clock.now(),
    }),
  'bury it': (h, lease) => h.store.bury(lease, { error: 'stale', now: h.clock.now() }),
  'release it': async (h, lease) => (await h.store.release([lease], h.clock.now()))[0]!,
};

const transactionalComplete: StaleWrite = (h, lease) =>
  h.inTransaction((tx) => h.store.complete(lease, tx, h.clock.now()));

function staleAfterTakeover(what: string, write: StaleWrite, needs: ContractCase['needs'] = []): ContractCase {
  return {
    name: `a stale token after takeover cannot ${what}, and the row is unchanged`,
    needs,
    async run({ harness }) {
      const { stale, current } = await takenOver(harness);
      harness.clock.advance(1_000);
      const before = mutableFields(await viewOf(harness, current.id));
      assert.equal(await write(harness, leaseOf(stale)), false);
      const after = await viewOf(harness, current.id);
      assert.deepEqual(mutableFields(after), before);
      assert.equal(after.status, 'processing');
      // The current holder's token still works, so its claims counter was not bumped either.
      assert.deepEqual(await harness.store.completeMany([leaseOf(current)], harness.clock.now()), [true]);
    },
  };
}

function staleAfterReclaim(what: string, write: StaleWrite, needs: ContractCase['needs'] = []): ContractCase {
  return {
    name: `a token of an earlier claim in the same epoch cannot ${what} (fenced by claims)`,
    needs,
    async run({ harness }) {
      await publish(harness, [event({ id: 'e1' })]);
      const [first] = await claimExpecting(harness, 'w1', ['e1']);
      const now = harness.clock.now();
      assert.equal(await harness.store.reschedule(leaseOf(first!), { availableAt: now, error: 'retry', now }), true);
      const [second] = await claimExpecting(harness, 'w1', ['e1']);
      assert.equal(second!.id, first!.id);
      assert.equal(epochOf(second!), epochOf(first!), 'same owner, same lane, same epoch');
      assert.equal(claimsOf(second!), claimsOf(first!) + 1);
      harness.clock.advance(1_000);
      const before = mutableFields(await viewOf(harness, first!.id));
      assert.equal(await write(harness, leaseOf(first!)), false);
      assert.deepEqual(mutableFields(await viewOf(harness, first!.id)), before);
      assert.deepEqual(await harness.store.completeMany([leaseOf(second!)], harness.clock.now()), [true]);
    },
  };
}

/** Every fenced write, each with a valid lease first and a malformed one second; none may take effect. */
function fencedWrites(
  store: Store<unknown>,
  now: Date,
): Record<string, (valid: DeliveryLease, bad: DeliveryLease) => Promise<unknown>> {
  return {
    completeMany: (valid, bad) => store.completeMany([valid, bad], now),
    release: (valid, bad) => store.release([valid, bad], now),
    reschedule: (_valid, bad) => store.reschedule(bad, { availableAt: now, error: 'x', now }),
    bury: (_valid, bad) => store.bury(bad, { error: 'x', now }),
  };
}

export const fencingCases: CaseGroup = {
  area: 'fencing',
  cases: [
    ...Object.entries(staleWrites).map(([what, write]) => staleAfterTakeover(what, write)),
    staleAfterTakeover('complete it in a transaction', transactionalComplete, ['transactions']),
    ...Object.entries(staleWrites).map(([what, write]) => staleAfterReclaim(what, write)),
    staleAfterReclaim('complete it in a transaction', transactionalComplete, ['transactions']),
    {
      name: 'a lease only covers the delivery it was issued for',
      async run({ harness }) {
        // Two deliveries in one lane; only h1's is claimed.
        await publish(harness, [event({ id: 'e1', key: 'k', handlers: handlers(H1, H2) })]);
        const [claimed] = await claim(harness, 'w1', { handlers: [H1] });
        const other = (await harness.store.listDeliveries({ handler: H2 })).items[0]!;
        const forged = { deliveryId: other.id, leaseToken: claimed!.leaseToken };
        const now = harness.clock.now();
        assert.deepEqual(await harness.store.completeMany([forged], now), [false]);
        assert.equal(await harness.store.bury(forged, { error: 'x', now }), false);
        assert.deepEqual(await harness.store.release([forged], now), [false]);
        const view = await viewOf(harness, other.id);
        assert.equal(view.status, 'pending');
        assert.equal(view.attempts, 0);
        assert.deepEqual(
          await harness.store.completeMany([{ deliveryId: '999999999', leaseToken: claimed!.leaseToken }], now),
          [false],
        );
      },
    },
    {
      name: 'a completed delivery cannot be written again with its token',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const now = harness.clock.now();
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], now), [true]);
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], now), [false]);
        assert.equal(await harness.store.reschedule(leaseOf(claimed!), { availableAt: now, error: 'x', now }), false);
        assert.deepEqual(await harness.store.release([leaseOf(claimed!)], now), [false]);
        assert.deepEqual((await harness.store.listDeliveries({ status: 'pending' })).items, []);
        assert.deepEqual((await harness.store.listDeliveries({ status: 'processing' })).items, []);
      },
    },
    {
      name: 'a malformed lease token throws RELAYBUS_INVALID_LEASE and writes nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const valid = leaseOf(claimed!);
        const now = harness.clock.now();
        const badTokens = ['nonsense', '', '1:2', '300:1:0', '-1:1:0', `${claimed!.lane}:x:0`];
        for (const token of badTokens) {
          const bad = { deliveryId: claimed!.id, leaseToken: token };
          for (const [name, write] of Object.entries(fencedWrites(harness.store as Store<unknown>, now))) {
            await rejectsWithCode(write(valid, bad), 'RELAYBUS_INVALID_LEASE').catch((error: unknown) => {
              throw new Error(`${name} with token ${JSON.stringify(token)}: ${(error as Error).message}`);
            });
          }
        }
        await rejectsWithCode(
          harness.store.extendLease({ owner: 'w1', lanes: [{ lane: 300, epoch: '1' }], leaseDurationMs: 1_000, now }),
          'RELAYBUS_INVALID_LEASE',
        );
        const view = await viewOf(harness, claimed!.id);
        assert.equal(view.status, 'processing');
        assert.equal(view.attempts, 0);
        assert.deepEqual(await harness.store.completeMany([valid], now), [true], 'the valid lease was never used');
      },
    },
    {
      name: 'a malformed lease token throws RELAYBUS_INVALID_LEASE in a transactional complete',
      needs: ['transactions'],
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        await harness.inTransaction(async (tx) => {
          await rejectsWithCode(
            harness.store.complete({ deliveryId: claimed!.id, leaseToken: '300:1:0' }, tx, harness.clock.now()),
            'RELAYBUS_INVALID_LEASE',
          );
        });
        assert.equal((await viewOf(harness, claimed!.id)).status, 'processing');
      },
    },
    {
      name: 'a lease with a malformed delivery id throws RELAYBUS_INVALID_INPUT',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const now = harness.clock.now();
        await rejectsWithCode(
          harness.store.completeMany([leaseOf(claimed!), { deliveryId: 'abc', leaseToken: claimed!.leaseToken }], now),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(
          harness.store.reschedule(leaseOf(claimed!), { availableAt: new Date(Number.NaN), error: 'x', now }),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(
          harness.store.bury(leaseOf(claimed!), { error: 42 as unknown as string, now }),
          'RELAYBUS_INVALID_INPUT',
        );
        const view = await viewOf(harness, claimed!.id);
        assert.equal(view.status, 'processing');
        assert.equal(view.attempts, 0);
      },
    },
  ],
};
