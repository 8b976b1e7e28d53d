import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it, type TestContext } from 'node:test';
import { RetryAlarm } from '../../src/dispatcher/retry-alarm.js';

/**
 * An alarm on a clock the test sets (`at`) and timers it advances (`tick`), apart where a case needs the two to disagree;
 * `advanceTo` moves both together. `rings()` counts its rings.
 */
function mockedAlarm(t: TestContext) {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  let clock = 1_000;
  let rings = 0;
  const alarm = new RetryAlarm(
    () => (rings += 1),
    () => clock,
  );
  return {
    alarm,
    at: (ms: number) => (clock = ms),
    tick: (ms: number) => t.mock.timers.tick(ms),
    advanceTo: (ms: number) => {
      const by = ms - clock;
      clock = ms;
      t.mock.timers.tick(by);
    },
    rings: () => rings,
  };
}

describe('RetryAlarm', () => {
  it('is pending from the first due time added until the last has rung', (t) => {
    const { alarm, advanceTo, rings } = mockedAlarm(t);
    assert.equal(alarm.pending, false);
    alarm.add(50);
    alarm.add(100);
    assert.equal(alarm.pending, true);
    advanceTo(1_050);
    assert.equal(rings(), 1);
    assert.equal(alarm.pending, true, 'one due time left');
    advanceTo(1_100);
    assert.equal(rings(), 2);
    assert.equal(alarm.pending, false);
    alarm.add(10);
    alarm.stop();
    assert.equal(alarm.pending, false, 'stop forgets them');
  });

  it('rings once per due time, earliest first, whatever order they were added in', (t) => {
    // On the test's clock: with real time, the two adds of 20 ms were once more than a millisecond apart on a loaded
    // CI machine (a pause between two statements), two due times that rightly rang twice.
    const { alarm, advanceTo, rings } = mockedAlarm(t);
    alarm.add(120);
    alarm.add(20);
    alarm.add(70);
    alarm.add(20);
    advanceTo(1_020);
    assert.equal(rings(), 1, 'the two due at 20 ms ring once, first');
    advanceTo(1_069);
    assert.equal(rings(), 1, 'not before 70 ms');
    advanceTo(1_070);
    assert.equal(rings(), 2);
    advanceTo(1_120);
    assert.equal(rings(), 3, 'the latest, added first, rings last');
    advanceTo(2_120);
    assert.equal(rings(), 3, 'once each');
    assert.equal(alarm.pending, false);
  });

  it('never rings before the due time, even when its timer fires early (it waits out the rest)', (t) => {
    // A claim started before the retried head is due finds nothing, and the head then waits for the next poll.
    const { alarm, at, tick, rings } = mockedAlarm(t);
    alarm.add(300);
    at(1_299.5); // the timer fires while the clock still reads half a millisecond before the due time
    tick(300);
    assert.equal(rings(), 0, 'rang before the due time');
    at(1_300.2);
    tick(1);
    assert.equal(rings(), 1, 'rang once the due time passed');
    tick(1_000);
    assert.equal(rings(), 1);
    alarm.stop();
  });

  it('rings once for due times less than a millisecond apart, at the later one', (t) => {
    // A batch of failures rescheduled together: one wake-up, not one per failure microseconds apart.
    const { alarm, at, tick, rings } = mockedAlarm(t);
    alarm.add(300);
    at(1_000.4);
    alarm.add(300); // due at 1,300.4
    at(1_000.2);
    alarm.add(300); // due at 1,300.2: between the two, folded in too
    at(1_300.3);
    tick(300);
    assert.equal(rings(), 0, 'not before the later due time');
    at(1_300.5);
    tick(1);
    assert.equal(rings(), 1, 'rang once the later due time passed');
    tick(1_000);
    assert.equal(rings(), 1, 'and only once');
    at(1_400);
    alarm.add(10);
    at(1_402);
    alarm.add(10); // 2 ms apart: two rings
    at(1_411);
    tick(20);
    at(1_413);
    tick(20);
    assert.equal(rings(), 3);
    alarm.stop();
  });

  it('full, keeps its earliest due times: one sooner than all it holds still rings', (t) => {
    const { alarm, at, tick, rings } = mockedAlarm(t);
    // The most it remembers, a minute or more away (a poison key's retries), then one due in 100 ms.
    for (let n = 0; n < 1_000; n += 1) alarm.add(60_000 + n * 10);
    alarm.add(100);
    at(1_100);
    tick(100);
    assert.equal(rings(), 1, 'the sooner one rang');
    // Every due time but the latest: that one made room for the sooner one.
    at(1_000 + 60_000 + 998 * 10);
    tick(60_000 + 998 * 10);
    assert.equal(rings(), 2);
    assert.equal(alarm.pending, false, 'the latest was forgotten');
  });

  it('rings no more once stopped', async () => {
    let rings = 0;
    const alarm = new RetryAlarm(() => (rings += 1));
    alarm.add(10);
    alarm.add(30);
    alarm.stop();
    await sleep(60);
    assert.equal(rings, 0);
  });
});
