/**
 * The harness's exactness checks catch what they claim to (run by hand:
 * `node --import tsx --test bench/validate.test.ts`; no database).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { makeHook } from './lib/hook.js';
import type { KeyMap } from './lib/keys.js';
import { Recorder } from './lib/recorder.js';
import { comparePairs, mergeRecords, orderCheck, validate, type Records } from './validate.js';

const keys: KeyMap = { kind: 'table', keys: Int32Array.from([7, 7, 7, 8]) };
const records = (rows: [i: number, h: number, start: number, end: number][]): Records => ({
  i: Int32Array.from(rows.map((r) => r[0])),
  h: Uint8Array.from(rows.map((r) => r[1])),
  t: Float64Array.from(rows.map((r) => r[2])),
  e: Float64Array.from(rows.map((r) => r[3])),
});
const nothingLeft = { pending: 0, dead: 0, completedRows: 0 };

test('in-order, non-overlapping starts pass', () => {
  const r = records([
    [0, 0, 1, 2],
    [1, 0, 3, 4],
    [2, 0, 5, 6],
    [3, 0, 1, 9],
  ]);
  assert.deepEqual(orderCheck(r, keys), { orderViolations: 0, overlaps: 0 });
});

test('a start out of publish order is a violation', () => {
  const r = records([
    [0, 0, 1, 1],
    [2, 0, 3, 3],
    [1, 0, 5, 5],
  ]);
  assert.equal(orderCheck(r, keys).orderViolations, 1);
});

test("a timestamp tie is never broken in the contender's favour", () => {
  const r = records([
    [0, 0, 1, 1],
    [1, 0, 1, 1],
  ]);
  assert.equal(orderCheck(r, keys).orderViolations, 1);
});

test('a tie between two starts of one dispatcher process is read in the order it recorded them', () => {
  const one = (rows: [i: number, h: number, start: number, end: number][]) => ({
    ...records(rows),
    p: new Uint8Array(rows.length),
  });
  assert.equal(
    orderCheck(
      one([
        [0, 0, 1, 1],
        [1, 0, 1, 1],
      ]),
      keys,
    ).orderViolations,
    0,
  );
  // Recorded out of publish order: a violation, tie or not.
  assert.equal(
    orderCheck(
      one([
        [1, 0, 1, 1],
        [0, 0, 1, 1],
      ]),
      keys,
    ).orderViolations,
    1,
  );
  // Two processes: a tie is a violation.
  const two = { ...records([[0, 0, 1, 1]]) };
  const merged = mergeRecords([two, records([[1, 0, 1, 1]])]);
  assert.equal(orderCheck(merged, keys).orderViolations, 1);
});

test('a delivery starting before the previous one of its (handler, key) ended is an overlap', () => {
  const r = records([
    [0, 0, 1, 5],
    [1, 0, 3, 6],
  ]);
  assert.deepEqual(orderCheck(r, keys), { orderViolations: 0, overlaps: 1 });
  // Other handler, same key: independent.
  assert.deepEqual(
    orderCheck(
      records([
        [0, 0, 1, 5],
        [1, 1, 3, 6],
      ]),
      keys,
    ),
    { orderViolations: 0, overlaps: 0 },
  );
});

test('validate: lost, duplicates and unexpected pairs make the run INVALID; unkeyed runs skip the order check', () => {
  const published = Int32Array.from([0, 1]);
  const r = records([
    [0, 0, 1, 1],
    [0, 1, 1, 1],
    [1, 0, 2, 2],
    [1, 0, 3, 3],
    [3, 1, 4, 4],
  ]);
  const result = validate(published, r, { kind: 'none' }, true, nothingLeft);
  assert.equal(result.valid, false);
  assert.equal(result.lost, 1);
  assert.equal(result.duplicates, 1);
  assert.equal(result.unexpected, 1);
  assert.equal(result.orderViolations, null);
});

test('comparePairs: the stored pairs of a publish run equal the published events x handlers', () => {
  const pairs = { i: Int32Array.from([0, 0, 1, 1]), h: Uint8Array.from([0, 1, 0, 1]) };
  assert.deepEqual(comparePairs(Int32Array.from([0, 1]), pairs), { lost: 0, unexpected: 0, duplicates: 0 });
  assert.deepEqual(comparePairs(Int32Array.from([0, 1, 2]), pairs), { lost: 2, unexpected: 0, duplicates: 0 });
  assert.equal(comparePairs(Int32Array.from([0]), pairs).unexpected, 2);
});

test('the in-process marker counts a second start of a running (handler, key); planned failures throw once', async () => {
  const state = { overlaps: 0 };
  const ok = new Recorder();
  const failed = new Recorder();
  const hook = makeHook({ mode: 'yield', keys, failFirst: Int32Array.from([3]) }, ok, failed, state);
  await Promise.all([hook(0, 0), hook(1, 0), hook(0, 1)]);
  assert.equal(state.overlaps, 1);
  await hook(2, 0);
  assert.equal(state.overlaps, 1);
  await assert.rejects(async () => hook(3, 0), /planned failure/);
  await hook(3, 0);
  assert.equal(failed.length, 1);
  assert.equal(ok.length, 5);
});
