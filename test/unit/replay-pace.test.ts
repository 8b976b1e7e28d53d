/**
 * `ReplayPace`, the pace of `runReplay`: unlimited or a fixed rate without a yield; with one, a rate that starts low,
 * halves (at most every 200 ms) while another handler's live deliveries wait past the target, grows (doubling in 2 s)
 * while none do, and leaves out handlers already behind at the first look until they catch up.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MIN_PACED_STEP, ReplayPace, YIELD_FLOOR_RATE, YIELD_START_RATE } from '../../src/replay/replay-pace.js';

const wait = (handler: string, ms: number) => ({ handler, ms });

describe('ReplayPace', () => {
  it('without a yield: full batches back to back, or a twentieth of the rate a step and the rest of its time waited', () => {
    const free = new ReplayPace(500, undefined, undefined);
    assert.equal(free.perStep, 500);
    free.started(500, 0);
    assert.equal(free.waitAfter(10), 0);
    assert.equal(free.observe([wait('h1', 10_000)], 0), undefined, 'no yield: waits are not looked at');
    assert.deepEqual(free.view, { eventsPerSecond: null, yielding: false, leftOut: [] });

    const rated = new ReplayPace(500, 2_000, undefined);
    assert.equal(rated.perStep, 100);
    rated.started(100, 0);
    assert.equal(rated.waitAfter(20), 30, '100 events at 2,000/s take 50 ms, 20 of them spent in the step');
  });

  it('yielding: starts low, halves while a live delivery waits past the target (at most every 200 ms), down to the floor', () => {
    const pace = new ReplayPace(500, undefined, 20);
    assert.equal(pace.view.eventsPerSecond, YIELD_START_RATE);
    assert.equal(pace.perStep, Math.max(MIN_PACED_STEP, YIELD_START_RATE / 20));
    assert.equal(pace.observe([wait('h1', 5)], 0), undefined, 'within the target');
    assert.deepEqual(pace.observe([wait('h1', 30)], 100), wait('h1', 30));
    assert.deepEqual(pace.view, { eventsPerSecond: YIELD_START_RATE / 2, yielding: true, leftOut: [] });
    pace.observe([wait('h1', 30)], 200);
    assert.equal(
      pace.view.eventsPerSecond,
      YIELD_START_RATE / 2,
      'not cut again within 200 ms: the cut has not shown yet',
    );
    pace.observe([wait('h1', 30)], 300);
    assert.equal(pace.view.eventsPerSecond, Math.round(YIELD_START_RATE / 4));
    for (let t = 500; t < 5_000; t += 200) pace.observe([wait('h1', 30)], t);
    assert.equal(pace.view.eventsPerSecond, YIELD_FLOOR_RATE);
    assert.equal(pace.perStep, MIN_PACED_STEP, 'the least step at the floor: a replay never stops');
    pace.started(MIN_PACED_STEP, 5_000);
    assert.equal(pace.waitAfter(5_010), 990, 'one step a second at the floor');
  });

  it('with a slow rate, a step takes at least MIN_PACED_STEP events and waits their share of the rate', () => {
    const slow = new ReplayPace(500, 50, undefined);
    assert.equal(slow.perStep, MIN_PACED_STEP, 'not 2 events twenty times a second');
    slow.started(MIN_PACED_STEP, 0);
    assert.equal(slow.waitAfter(0), (MIN_PACED_STEP / 50) * 1000);
    assert.equal(new ReplayPace(10, 50, undefined).perStep, 10, 'never more than a batch');
  });

  it('a cut starts from the rate the steps achieved when that is lower: an unlimited replay slows at once', () => {
    const pace = new ReplayPace(500, undefined, 20);
    for (let t = 0; t < 20_000; t += 100) pace.observe([], t);
    assert.equal(pace.view.eventsPerSecond, null, 'unlimited after a clear road');
    pace.started(500, 20_000);
    pace.observe([wait('h1', 50)], 20_100);
    assert.equal(pace.view.eventsPerSecond, 2_500, '500 events in 100 ms is 5,000/s, halved');
  });

  it('grows while no live delivery waits past the target, doubling in 2 s, up to the rate given', () => {
    const pace = new ReplayPace(500, 3_000, 20);
    pace.observe([], 0);
    pace.observe([wait('h1', 20)], 500);
    assert.equal(
      pace.view.eventsPerSecond,
      Math.round(YIELD_START_RATE * 2 ** 0.25),
      'half a second: 2^(1/4) more; a wait at the target is not over it',
    );
    for (let t = 1_000; t <= 10_000; t += 500) pace.observe([], t);
    assert.equal(pace.view.eventsPerSecond, 3_000);
    pace.observe([], 60_000);
    assert.equal(pace.view.eventsPerSecond, 3_000, 'a long gap between steps counts as half a second at most');
  });

  it('after an overshoot, comes back slowly (doubling in 10 s) up to twice the rate it overshot at, then fast again', () => {
    const pace = new ReplayPace(500, undefined, 20);
    for (let t = 0; t <= 2_000; t += 100) pace.observe([], t);
    assert.equal(pace.view.eventsPerSecond, 2 * YIELD_START_RATE, 'doubled in 2 s');
    pace.started(50, 2_000);
    pace.observe([wait('h1', 30)], 2_100);
    assert.equal(pace.view.eventsPerSecond, YIELD_START_RATE, 'overshot at 500 events/s: halved');
    pace.started(25, 2_200);
    pace.observe([wait('h1', 30)], 2_300);
    assert.equal(pace.view.eventsPerSecond, YIELD_START_RATE / 2, 'cut again while the waits last');
    const live = [wait('h1', 4)];
    for (let t = 2_400; t <= 12_300; t += 100) pace.observe(live, t);
    assert.equal(pace.view.eventsPerSecond, YIELD_START_RATE, 'ten seconds to double, below twice the overshoot');
    for (let t = 12_400; t <= 32_300; t += 100) pace.observe(live, t);
    assert.equal(pace.view.eventsPerSecond, 4 * YIELD_START_RATE, 'twice the overshoot, slowly');
    for (let t = 32_400; t <= 36_300; t += 100) pace.observe(live, t);
    assert.equal(pace.view.eventsPerSecond, 16 * YIELD_START_RATE, 'past it, doubling every 2 s again');
  });

  it('after an overshoot, grows at once when no live delivery starts any more', () => {
    const pace = new ReplayPace(500, undefined, 20);
    pace.observe([], 0);
    pace.started(25, 0);
    pace.observe([wait('h1', 30)], 100);
    assert.equal(pace.view.eventsPerSecond, YIELD_START_RATE / 2);
    for (let t = 200; t <= 2_100; t += 100) pace.observe([], t);
    assert.equal(pace.view.eventsPerSecond, YIELD_START_RATE, 'doubled in 2 s: the live traffic is gone');
  });

  it('leaves out a handler already waiting at the first look, until it catches up', () => {
    const pace = new ReplayPace(500, undefined, 20);
    assert.equal(pace.observe([wait('stuck', 60_000), wait('h1', 3)], 0), undefined);
    assert.deepEqual(pace.view, { eventsPerSecond: YIELD_START_RATE, yielding: false, leftOut: ['stuck'] });
    assert.deepEqual(pace.observe([wait('stuck', 60_100), wait('h1', 40)], 100), wait('h1', 40));
    assert.equal(pace.view.eventsPerSecond, YIELD_START_RATE / 2, 'another handler still counts');
    pace.observe([], 400);
    assert.deepEqual(pace.view.leftOut, [], 'caught up');
    assert.deepEqual(pace.observe([wait('stuck', 30)], 700), wait('stuck', 30), 'it counts again');
  });
});
