/**
 * Claim loops and other workers. A worker's second claim loop overlaps its handlers with its claims; when other workers
 * hold lanes too, their claims fill those gaps, and the loops of each worker claim in turn instead (measured: see
 * `Dispatcher`, `#peersHoldLanes`), and the later ones rest: they let their runs end, hand their lanes back and claim
 * no more while the others hold lanes (`Dispatcher`, `#rest`); a worker that starts beside others never wakes them.
 * Alone, the loops still claim side by side. Real dispatcher, in-memory store; each claim is held a few milliseconds so
 * that two at once would overlap.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { createRelayBus } from '../../src/bus/bus.js';
import { defineEvent } from '../../src/core/events.js';
import { laneOf } from '../../src/core/lanes.js';
import { memoryStore } from '../../src/memory/memory-store.js';
import type { DeliveryLease } from '../../src/store/contract.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { StubClock } from '../support/clock.js';
import { pause, spyStore, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const Ping = defineEvent('ping', Type.Object({ n: Type.Integer() }));
const EVENTS = 600;
const KEYS = Array.from({ length: 97 }, (_, n) => `k${n}`);
/** A key in a lane none of KEYS is in: the peer's lane holds nothing of the backlog. */
const PEER_KEY = (() => {
  const used = new Set(KEYS.map((key) => laneOf(key, '')));
  for (let n = 0; ; n += 1) if (!used.has(laneOf(`peer-${n}`, ''))) return `peer-${n}`;
})();

/**
 * Drain a backlog with two claim loops, `peer` holding a lane or not (`'later'`: taken once both loops have claimed);
 * how many claims ran at once, at most.
 */
async function drain(withPeer: boolean | 'later', batchSize = 10) {
  const clock = new StubClock();
  const memory = memoryStore();
  /** Claims in flight (beside the peer: those that started after a claim reported it). */
  let inFlight = 0;
  /** The most of them at once. */
  let mostAtOnce = 0;
  let peersSeen = false;
  let peerLanesSeen: number | undefined;
  /** Claims by owner, counting those that started once a claim had reported the peer. */
  const claimsAfterPeer = new Map<string, number>();
  /** Every claim, by owner. */
  const claimsBy = new Map<string, number>();
  /** The owners whose lanes were handed back while the bus ran. */
  const relinquished: string[] = [];
  /** The limits claims asked for once the backlog had drained (every handler slot free), by then. */
  let drained = false;
  const limitsIdle: number[] = [];
  /** Every claim, with completions riding or not, is held 3 ms and counted while in flight. */
  const held = async <T>({ owner, limit }: ClaimParams, claim: () => Promise<T>): Promise<T> => {
    // Beside the peer, only claims that started once a claim had reported it: one in flight at that moment started
    // before the dispatcher knew, without waiting for a turn.
    const counted = peersSeen || !withPeer;
    if (counted) inFlight += 1;
    if (peersSeen) claimsAfterPeer.set(owner, (claimsAfterPeer.get(owner) ?? 0) + 1);
    claimsBy.set(owner, (claimsBy.get(owner) ?? 0) + 1);
    if (drained) limitsIdle.push(limit);
    mostAtOnce = Math.max(mostAtOnce, inFlight);
    try {
      await pause(3);
      return await claim();
    } finally {
      if (counted) inFlight -= 1;
    }
  };
  const { store } = spyStore(memory, {
    claim: (params: ClaimParams) => held(params, () => owners.claim(memory, params)),
    completeAndClaim: (leases: readonly DeliveryLease[], params: ClaimParams) =>
      held(params, async () => {
        const result = await owners.completeAndClaim(memory, leases, params);
        peerLanesSeen = result.peerLanes;
        if ((result.peerLanes ?? 0) > 0) peersSeen = true;
        return result;
      }),
    relinquish: (owner: string) => {
      relinquished.push(owner);
      return owners.relinquish(memory, owner);
    },
  });
  const bus = createRelayBus({
    store,
    events: [Ping],
    clock,
    dispatcher: { pollIntervalMs: 10, claimLoops: 2, concurrency: 20, batchSize },
  });
  try {
    let handled = 0;
    bus.on(Ping, 'h', async () => {
      await pause(1);
      handled += 1;
    });
    // Another worker holds a lane: its delivery, for a handler of its own, stays in flight (the stub clock keeps its
    // lease). It takes only that delivery's lane.
    const peerTakesItsLane = async () => {
      const peerClaim = await owners.claim(memory, {
        owner: 'peer',
        handlers: ['peer-h'],
        limit: 1,
        leaseDurationMs: 60_000,
        now: clock.now(),
      });
      assert.equal(peerClaim.length, 1);
    };
    if (withPeer !== false) {
      await memory.transaction((tx) =>
        memory.publish(tx, [
          { type: Ping.type, key: PEER_KEY, payload: { n: -1 }, handlers: [{ name: 'peer-h', maxAttempts: 3 }] },
        ]),
      );
    }
    if (withPeer === true) await peerTakesItsLane();
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        Array.from({ length: EVENTS }, (_, n) => ({
          event: Ping,
          payload: { n },
          options: { key: KEYS[n % KEYS.length]! },
        })),
      ),
    );
    await bus.start();
    if (withPeer === 'later') {
      await waitFor(() => claimsBy.size >= 2, 'both loops claimed', 5_000);
      await peerTakesItsLane();
    }
    await waitFor(() => handled >= EVENTS, 'the backlog drained', 20_000);
    // The claims of the next polls, with every handler slot free.
    drained = true;
    await waitFor(() => limitsIdle.length >= 2, 'two claims once drained', 5_000);
    const holders = new Set((await memory.listLanes()).map((lane) => lane.owner));
    // Copied: stop() below relinquishes every loop's lanes too.
    return {
      mostAtOnce,
      peersSeen,
      peerLanesSeen,
      claimsAfterPeer,
      claimsBy: new Map(claimsBy),
      relinquished: [...relinquished],
      holders,
      first: bus.owner!,
      limitsIdle: [...limitsIdle],
    };
  } finally {
    await bus.stop({ graceMs: 0 });
  }
}

describe('claim loops beside other workers', () => {
  it('alone, the two loops claim side by side', { timeout: 30_000 }, async () => {
    const { mostAtOnce, peerLanesSeen } = await drain(false);
    assert.equal(peerLanesSeen, 0);
    assert.equal(mostAtOnce, 2, 'claims of both loops overlapped');
  });

  it('once another worker holds a lane, they claim in turn', { timeout: 30_000 }, async () => {
    const { mostAtOnce, peersSeen } = await drain('later');
    assert.equal(peersSeen, true, 'a claim reported the other worker');
    assert.equal(mostAtOnce, 1, 'never two claims of this worker at once');
  });

  it('alone, neither loop rests', { timeout: 30_000 }, async () => {
    const { relinquished } = await drain(false);
    assert.deepEqual(relinquished, [], 'no lanes handed back while the bus ran');
  });

  it('the second loop starts dormant: alone it joins once a claim comes back full, beside another worker it never claims', {
    timeout: 30_000,
  }, async () => {
    const alone = await drain(false);
    const second = (run: typeof alone) => [...run.claimsBy].filter(([owner]) => owner !== run.first);
    assert.equal(second(alone).length, 1, `alone, both loops claimed: ${[...alone.claimsBy]}`);
    const beside = await drain(true);
    assert.ok((beside.claimsBy.get(beside.first) ?? 0) >= 10, `the first loop drained: ${[...beside.claimsBy]}`);
    assert.deepEqual(second(beside), [], 'beside another worker, the second loop claimed nothing');
  });

  it('once another worker holds a lane, the second loop rests and the first drains the rest', {
    timeout: 30_000,
  }, async () => {
    const { claimsAfterPeer, relinquished, holders, first } = await drain('later');
    assert.equal(relinquished.length, 1, `one loop handed its lanes back, once: ${relinquished.join(', ')}`);
    const second = relinquished[0]!;
    assert.notEqual(second, first, 'the second loop, not the first');
    assert.ok((claimsAfterPeer.get(second) ?? 0) <= 2, `the second loop stopped claiming: ${[...claimsAfterPeer]}`);
    assert.ok((claimsAfterPeer.get(first) ?? 0) >= 10, `the first loop went on: ${[...claimsAfterPeer]}`);
    assert.equal(holders.has(second), false, 'the resting loop holds no lane');
    assert.ok(holders.has('peer'), "the other worker's lane is still its own");
  });

  it('with another worker holding a lane, the first loop claims with every handler slot, not its half', {
    timeout: 30_000,
  }, async () => {
    const { limitsIdle } = await drain(true, 20);
    assert.equal(
      Math.max(...limitsIdle),
      20,
      `with every slot free, a claim asked for all 20: ${limitsIdle.join(', ')}`,
    );
  });
});
