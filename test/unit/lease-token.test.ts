import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidLeaseError } from '../../src/core/errors.js';
import { formatLeaseToken, isLaterEpoch, parseLeaseToken } from '../../src/core/lease-token.js';

describe('lease tokens', () => {
  it('round-trips lane:epoch:claims, epochs beyond 2^53 included', () => {
    const parts = { lane: 255, epoch: '9007199254740993', claims: 7 };
    assert.equal(formatLeaseToken(parts), '255:9007199254740993:7');
    assert.deepEqual(parseLeaseToken('255:9007199254740993:7'), parts);
  });

  for (const bad of [
    '',
    '1:2',
    '1:2:3:4',
    'a:1:1',
    '-1:1:1',
    '256:1:1',
    '300:0:0',
    '1:1:99999999999',
    ' 1:1:1',
    '1.5:1:1',
  ]) {
    it(`rejects ${JSON.stringify(bad)} with RELAYBUS_INVALID_LEASE`, () => {
      assert.throws(
        () => parseLeaseToken(bad),
        (error: unknown) => error instanceof InvalidLeaseError && error.code === 'RELAYBUS_INVALID_LEASE',
      );
    });
  }

  it('hands every parse of one token the same frozen parts, normalised once (leading zeros of the epoch)', () => {
    const first = parseLeaseToken('12:0042:3');
    assert.deepEqual(first, { lane: 12, epoch: '42', claims: 3 });
    assert.equal(parseLeaseToken('12:0042:3'), first, 'parsed once, then remembered');
    assert.ok(Object.isFrozen(first), 'no caller can change what the next one is handed');
    assert.throws(() => parseLeaseToken('12:0042:3:'), InvalidLeaseError, 'a near miss is parsed, and refused');
  });

  it('rejects a token that is not a string', () => {
    assert.throws(() => parseLeaseToken(42), InvalidLeaseError);
  });

  it('orders epochs as the numbers they are, past 2^53 too, whatever their text sorts as', () => {
    const epoch = (text: string) => parseLeaseToken(`1:${text}:0`).epoch;
    assert.equal(isLaterEpoch(epoch('10'), epoch('9')), true, '10 after 9 (as text, "10" < "9")');
    assert.equal(isLaterEpoch(epoch('9'), epoch('10')), false);
    assert.equal(isLaterEpoch(epoch('009'), epoch('10')), false, 'leading zeros are gone once parsed');
    assert.equal(isLaterEpoch(epoch('9007199254740993'), epoch('9007199254740992')), true, 'past 2^53');
    assert.equal(isLaterEpoch(epoch('42'), epoch('42')), false, 'not later than itself');
  });
});
