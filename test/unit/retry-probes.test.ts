import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_PROBES_PER_CLAIM, PROBE_TTL_MS, RetryProbes } from '../../src/postgres/retry-probes.js';

describe('retry probes (keys whose rescheduled head is looked up directly)', () => {
  it('are passed once due, on every claim until a claim returns the key, and dropped once expired', () => {
    const probes = new RetryProbes();
    probes.add(7, 'h', 'k1', new Date(1_000));
    probes.add(9, 'h', 'k2', new Date(5_000));
    assert.deepEqual(probes.due(999), [[], [], []], 'not due yet');
    assert.deepEqual(probes.due(1_000), [[7], ['h'], ['k1']]);
    // The claim did not return k1 (its lane was not held then): the next claim looks it up again.
    assert.deepEqual(probes.due(1_050), [[7], ['h'], ['k1']]);
    probes.claimed([
      { lane: 7, handler: 'h', key: 'k1' },
      { lane: '3', handler: 'h', key: null },
    ]);
    assert.deepEqual(probes.due(5_000), [[9], ['h'], ['k2']]);
    assert.deepEqual(probes.due(5_000 + PROBE_TTL_MS + 1), [[], [], []], 'expired');
    assert.equal(probes.size, 0);
  });

  it('keep one probe per key (the latest due time) and pass the oldest first, at most MAX_PROBES_PER_CLAIM', () => {
    const probes = new RetryProbes();
    for (let i = 0; i < MAX_PROBES_PER_CLAIM + 10; i += 1) probes.add(i % 256, 'h', `k${i}`, new Date(100 + i));
    probes.add(0, 'h', 'k0', new Date(50_000));
    const [lanes, , keys] = probes.due(10_000);
    assert.equal(lanes.length, MAX_PROBES_PER_CLAIM);
    assert.equal(keys[0], 'k1', 'k0 is due later now');
    assert.ok(!keys.includes('k0'));
  });
});
