import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { RetryAlarm } from '../../src/dispatcher/retry-alarm.js';

describe('RetryAlarm', () => {
  it('rings once per due time, earliest first, whatever order they were added in', async () => {
    const start = performance.now();
    const rings: number[] = [];
    const alarm = new RetryAlarm(() => rings.push(performance.now() - start));
    alarm.add(120);
    alarm.add(20);
    alarm.add(70);
    alarm.add(20);
    await sleep(250);
    // One ring per distinct due time (two at 20 ms ring once); a late timer may fold two into one, never add rings.
    assert.ok(rings.length >= 1 && rings.length <= 3, `rang ${rings.length} times`);
    assert.ok(rings[0]! >= 19, `first ring at ${rings[0]} ms, not before the earliest due time`);
    assert.ok(rings.at(-1)! >= 119, 'the last at the latest due time');
    assert.deepEqual(
      rings,
      [...rings].sort((a, b) => a - b),
    );
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
