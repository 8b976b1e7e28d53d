import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { claimedTuples } from '../../src/postgres/rows.js';

// One claimed delivery as sql/fragments/claimed-rows.sql writes it: 13 values.
const tuple = ['1', 3, 0, ['e1', 'test.event', 'h1', 'k'], '1', { a: 1 }, null, 0, 5, 1_000, 1_000, false, null];

describe('claimedTuples', () => {
  it('reads the tuples of a claim, and none when it picked nothing', () => {
    assert.deepEqual(claimedTuples(JSON.stringify([tuple, tuple])), [tuple, tuple]);
    assert.deepEqual(claimedTuples(null), []);
  });

  it('refuses a tuple with a value missing (a NULL the fragment did not write as null) instead of shifting the rest', () => {
    const short = tuple.filter((_, index) => index !== 4);
    assert.throws(
      () => claimedTuples(JSON.stringify([tuple, short])),
      /came with 12 values instead of 13 \(sql\/fragments\/claimed-rows\.sql\)/,
    );
  });
});
