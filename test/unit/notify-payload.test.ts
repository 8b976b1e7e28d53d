import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { lanesOfPayload } from '../../src/postgres/postgres-store.js';

describe('NOTIFY payloads: the lanes a publish wrote', () => {
  it('reads a list of lanes, and nothing from an empty or foreign payload (then the claim looks everywhere)', () => {
    assert.deepEqual(lanesOfPayload('3'), [3]);
    assert.deepEqual(lanesOfPayload('0,17,255'), [0, 17, 255]);
    assert.equal(lanesOfPayload(''), undefined, 'many lanes, or a reconnect');
    assert.equal(lanesOfPayload('256'), undefined, 'no such lane');
    assert.equal(lanesOfPayload('1,x'), undefined);
    assert.equal(lanesOfPayload('{"hello":1}'), undefined, 'someone else NOTIFYing on the channel');
  });
});
