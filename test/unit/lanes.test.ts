import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fnv1a32, isLane, laneOf, LANE_COUNT } from '../../src/core/lanes.js';

describe('lanes', () => {
  it('hashes with FNV-1a 32-bit (published test vectors)', () => {
    assert.equal(fnv1a32(''), 0x811c9dc5);
    assert.equal(fnv1a32('a'), 0xe40c292c);
    assert.equal(fnv1a32('foobar'), 0xbf9cf968);
  });

  it('hashes the UTF-8 bytes, not UTF-16 code units', () => {
    assert.notEqual(fnv1a32('é'), fnv1a32('\u00e9'.normalize('NFD')));
    assert.equal(fnv1a32('é'), fnv1a32(Buffer.from('é', 'utf8').toString()));
  });

  it('puts a key in one lane whatever the event, and an unkeyed event by its id', () => {
    assert.equal(laneOf('customer-7', 'e1'), laneOf('customer-7', 'e2'));
    assert.equal(laneOf(null, 'e1'), fnv1a32('e1') % 256);
    assert.equal(laneOf(undefined, 'customer-7'), laneOf('customer-7', 'zzz'));
  });

  it('spreads keys over all 256 lanes', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 5000; i += 1) seen.add(laneOf(`key-${i}`, 'x'));
    assert.equal(seen.size, LANE_COUNT);
    assert.ok(isLane(0) && isLane(255) && !isLane(256) && !isLane(-1) && !isLane(1.5));
  });
});
