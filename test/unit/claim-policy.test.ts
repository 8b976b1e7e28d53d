/**
 * The dispatcher's claim policy on its own, without a store or a timer: "claim now?", "with which hints?" and "whom to
 * wake?" from its state and injected clocks.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  BUSY_CLAIM,
  ClaimPolicy,
  type ClaimPolicyConfig,
  MAX_HINTED_LANES,
} from '../../src/dispatcher/claim-policy.js';

/** A policy with clocks the test moves: `wall` (acquiring when full) and `real` (looking at free lanes). */
function policyOf(overrides: Partial<ClaimPolicyConfig> = {}) {
  const clocks = { wall: 1_000_000, real: 5_000 };
  const policy = new ClaimPolicy({
    loops: 1,
    handlers: ['h'],
    batchSize: 100,
    concurrency: 200,
    leaseDurationMs: 30_000,
    pollIntervalMs: 1_000,
    followers: 0,
    now: () => undefined,
    wallNow: () => clocks.wall,
    realNow: () => clocks.real,
    ...overrides,
  });
  return { policy, clocks };
}

const notEmpty = { full: false, empty: false, runsInLoop: true };

describe('claim policy: with which hints', () => {
  it('the first claim takes free lanes first and asks to acquire when full; the next does neither', () => {
    const { policy } = policyOf();
    const [loop] = policy.loops;
    const first = policy.plan(loop!, 100);
    assert.deepEqual(first.params, {
      handlers: ['h'],
      limit: 100,
      leaseDurationMs: 30_000,
      now: undefined,
      retryLookaheadMs: 5,
      freeLanes: 'first',
      acquireWhenFull: true,
    });
    assert.equal(first.light, false);
    assert.equal(first.carriesCompletions, true, 'no wake-ups heard: the completions ride on the look');
    policy.claimed(loop!, first, 100, undefined);
    const second = policy.plan(loop!, 100);
    assert.equal(second.params.acquireWhenFull, undefined, 'once per lease duration');
    assert.equal(second.params.freeLanes, undefined, 'a busy loop: held lanes first');
  });

  it('asks to acquire when full again once a lease duration has passed since the last claim that did', () => {
    const { policy, clocks } = policyOf();
    const [loop] = policy.loops;
    policy.claimed(loop!, policy.plan(loop!, 10), 0, undefined);
    clocks.wall += 29_999;
    assert.equal(policy.plan(loop!, 10).params.acquireWhenFull, undefined);
    clocks.wall += 1;
    assert.equal(policy.plan(loop!, 10).params.acquireWhenFull, true);
  });

  it('while wake-ups are heard, a loop that is not busy looks at free lanes once per poll interval', () => {
    const { policy, clocks } = policyOf();
    policy.listening = true;
    const [loop] = policy.loops;
    const first = policy.plan(loop!, 10);
    assert.equal(first.light, false, 'the first claim looks');
    assert.equal(first.params.freeLanes, 'first', 'everywhere: nothing is known yet');
    clocks.real += 999;
    const light = policy.plan(loop!, 10);
    assert.equal(light.light, true);
    assert.equal(light.params.freeLanes, 'skip');
    assert.equal(light.carriesCompletions, false);
    clocks.real += 1;
    const look = policy.plan(loop!, 10);
    assert.equal(look.light, false, 'the look is due');
    // The store looks whether anything unannounced is due before its full claim; the batcher writes the completions,
    // so that look can be all the claim does.
    assert.equal(look.params.freeLanes, 'when-due');
    assert.equal(look.carriesCompletions, false);
    policy.claimed(loop!, look, BUSY_CLAIM, undefined);
    const busy = policy.plan(loop!, BUSY_CLAIM);
    assert.equal(busy.params.freeLanes, undefined, 'a busy loop looks every time, held lanes first');
    assert.equal(busy.carriesCompletions, true);
  });

  it('a due look that meets a wake-up with lanes goes after a light claim of those lanes, at once', () => {
    const { policy, clocks } = policyOf();
    policy.listening = true;
    const [loop] = policy.loops;
    policy.plan(loop!, 10);
    clocks.real += 1_000;
    policy.heard([7, 42]);
    const named = policy.plan(loop!, 10);
    assert.equal(named.light, true);
    assert.deepEqual(named.params.preferLanes, [7, 42]);
    assert.equal(loop!.scanDeferred, true, 'the look follows at once');
    const look = policy.plan(loop!, 10);
    assert.equal(look.light, false);
    assert.equal(look.params.preferLanes, undefined, 'the lanes are named to one claim');
    assert.equal(loop!.scanDeferred, false);
  });

  it('a wake-up without lanes (or with more than are remembered) makes the next claim look at free lanes', () => {
    const { policy } = policyOf();
    policy.listening = true;
    const [loop] = policy.loops;
    policy.plan(loop!, 10);
    assert.equal(policy.plan(loop!, 10).light, true);
    policy.heard(undefined);
    const asked = policy.plan(loop!, 10);
    assert.equal(asked.light, false);
    assert.equal(asked.params.freeLanes, 'first', "the full look: what the wake-up announced is not 'when-due' yet");
    assert.equal(asked.carriesCompletions, true);
    policy.heard(Array.from({ length: MAX_HINTED_LANES }, (_, lane) => lane));
    policy.heard([200]);
    const plan = policy.plan(loop!, 10);
    assert.equal(plan.light, false, 'one lane too many: look everywhere');
    assert.equal(plan.params.preferLanes?.length, MAX_HINTED_LANES);
  });

  it('beside other workers a loop that is not busy takes held lanes first; followers start at one and double', () => {
    const { policy } = policyOf({ followers: 6 });
    const [loop] = policy.loops;
    policy.peersHoldLanes = true;
    const plan = policy.plan(loop!, 10);
    assert.equal(plan.params.freeLanes, undefined);
    assert.equal(plan.params.followers, 1);
    loop!.claimTook(10, false);
    assert.equal(policy.plan(loop!, 10).params.followers, 2);
    loop!.claimTook(10, false);
    loop!.claimTook(10, false);
    assert.equal(policy.plan(loop!, 10).params.followers, 6, 'capped at DispatcherOptions.followers');
  });

  it('a full claim (a backlog) brings the followers to the most at once', () => {
    const short = policyOf({ followers: 9 }).policy.loops[0]!;
    assert.equal(short.claimTook(10, false), true);
    assert.equal(short.followersNow, 2, 'a claim short of its limit doubles them');
    const { policy } = policyOf({ followers: 9 });
    const full = policy.loops[0]!;
    assert.equal(full.claimTook(10, true), true);
    assert.equal(policy.plan(full, 10).params.followers, 9, 'a full one takes them to DispatcherOptions.followers');
    assert.equal(full.claimTook(10, true), false, 'nothing changes at the most');
  });

  it('the retry lookahead covers four of the longest recent claims, decaying by a tenth a claim', () => {
    const { policy } = policyOf();
    const [loop] = policy.loops;
    loop!.claimTook(100, false);
    assert.equal(policy.plan(loop!, 10).params.retryLookaheadMs, 405);
    loop!.claimTook(10, false);
    assert.equal(loop!.retryLookaheadMs, 365);
    loop!.claimTook(1_000, false);
    assert.equal(loop!.retryLookaheadMs, 1_000, 'at most MAX_RETRY_LOOKAHEAD_MS');
  });

  it('a claim with completions riding, or of one of several loops, is a completeAndClaim; a light one alone is not', () => {
    const one = policyOf().policy;
    const plan = one.plan(one.loops[0]!, 10);
    assert.equal(one.completesAndClaims(plan, false), false);
    assert.equal(one.completesAndClaims(plan, true), true);
    const two = policyOf({ loops: 2 }).policy;
    assert.equal(two.completesAndClaims(two.plan(two.loops[0]!, 10), false), true, 'it learns of other workers');
    two.listening = true;
    two.plan(two.loops[0]!, 10);
    const light = two.plan(two.loops[0]!, 10);
    assert.equal(light.light, true);
    assert.equal(two.completesAndClaims(light, false), false);
  });
});

describe('claim policy: claim now?', () => {
  it('a loop claims at most its share of the slots, all of them beside other workers', () => {
    const { policy } = policyOf({ loops: 2, batchSize: 500, concurrency: 100 });
    assert.equal(policy.limit(80), 50);
    assert.equal(policy.limit(30), 30);
    policy.peersHoldLanes = true;
    assert.equal(policy.limit(80), 80);
    assert.equal(policy.claimsInTurn(), true, 'and the loops claim in turn');
  });

  it('later loops start dormant and wait until a claim comes back full, unless other workers hold lanes', () => {
    const { policy } = policyOf({ loops: 2 });
    const [first, second] = policy.loops;
    assert.equal(policy.waits(first!), false);
    assert.equal(policy.waits(second!), true);
    const wake = policy.launched(first!, { ...notEmpty, full: true });
    assert.deepEqual(wake, [second], 'a backlog wakes the dormant loop');
    assert.equal(policy.waits(second!), false);
    policy.peersHoldLanes = true;
    assert.equal(policy.waits(second!), true, 'beside other workers it stays asleep');
  });

  it('a later loop rests beside other workers unless it waits for a retried head or must forget a failed claim', () => {
    const { policy } = policyOf({ loops: 2 });
    const [first, second] = policy.loops;
    second!.dormant = false;
    assert.equal(policy.mayRest(second!, false, false), false, 'alone: no');
    policy.peersHoldLanes = true;
    assert.equal(policy.mayRest(first!, false, false), false, 'never the first loop');
    assert.equal(policy.mayRest(second!, false, false), true);
    assert.equal(policy.mayRest(second!, true, false), false, 'its retry alarm is set');
    assert.equal(policy.mayRest(second!, false, true), false, 'a failed claim to forget');
    second!.retryCame();
    assert.equal(policy.mayRest(second!, false, false), false, 'a retried head is due');
    policy.plan(second!, 10);
    assert.equal(second!.retryDue, false, 'the claim looks the head up');
    policy.rested(second!);
    assert.equal(second!.dormant, true);
  });
});

describe('claim policy: whom to wake', () => {
  it('an empty claim of a loop that runs nothing makes it barren: runs that end do not wake it', () => {
    const { policy } = policyOf({ loops: 2 });
    const [first, second] = policy.loops;
    policy.launched(second!, { full: false, empty: true, runsInLoop: false });
    assert.equal(second!.barren, true);
    assert.equal(second!.dormant, true, 'a later loop turns dormant');
    assert.deepEqual(policy.toWake(), [first]);
    policy.launched(second!, { full: false, empty: true, runsInLoop: true });
    assert.equal(second!.barren, false, 'it still runs something');
  });

  it('a short claim of the first loop ends the backlog', () => {
    const { policy } = policyOf({ loops: 2 });
    const [first, second] = policy.loops;
    policy.launched(second!, { ...notEmpty, full: true });
    assert.equal(policy.backlog, true);
    policy.launched(second!, notEmpty);
    assert.equal(policy.backlog, true, 'not a later loop');
    policy.launched(first!, notEmpty);
    assert.equal(policy.backlog, false);
  });

  it(`a run that ends wakes the loops while work flows (a claim of ${BUSY_CLAIM} or a full one), a loop waits for a slot, or followers wait`, () => {
    const { policy } = policyOf();
    const [loop] = policy.loops;
    assert.equal(policy.wakeOnRunEnd(false, false), false, 'a light load wakes nobody');
    assert.equal(policy.wakeOnRunEnd(true, false), true);
    assert.equal(policy.wakeOnRunEnd(false, true), true);
    policy.claimed(loop!, policy.plan(loop!, 100), BUSY_CLAIM, undefined);
    assert.equal(loop!.busy, true);
    assert.equal(policy.wakeOnRunEnd(false, false), true);
    policy.claimed(loop!, policy.plan(loop!, 8), 8, undefined);
    assert.equal(loop!.busy, true, 'a full batch of fewer');
    policy.claimed(loop!, policy.plan(loop!, 100), BUSY_CLAIM - 1, undefined);
    assert.equal(policy.flowing(), false);
  });

  it('a claim that says whether other workers hold lanes sets it; one that does not leaves it', () => {
    const { policy } = policyOf({ loops: 2 });
    const [loop] = policy.loops;
    policy.claimed(loop!, policy.plan(loop!, 10), 1, 3);
    assert.equal(policy.peersHoldLanes, true);
    policy.claimed(loop!, policy.plan(loop!, 10), 1, undefined);
    assert.equal(policy.peersHoldLanes, true);
    policy.claimed(loop!, policy.plan(loop!, 10), 1, 0);
    assert.equal(policy.peersHoldLanes, false);
  });

  it('a retried head due makes a dormant loop claim and keeps slots for its claim until that claim starts', () => {
    const { policy } = policyOf({ loops: 2 });
    const [, second] = policy.loops;
    assert.equal(policy.retryWanted(), false);
    second!.retryCame();
    assert.equal(second!.dormant, false);
    assert.equal(policy.retryWanted(), true);
    policy.plan(second!, 10);
    assert.equal(policy.retryWanted(), false);
  });

  it('a failed claim makes the next one look at free lanes', () => {
    const { policy } = policyOf();
    policy.listening = true;
    const [loop] = policy.loops;
    policy.plan(loop!, 10);
    policy.claimFailed(loop!);
    assert.equal(policy.plan(loop!, 10).light, false);
  });
});
