/**
 * `LiveLag`, a worker's measure of its live deliveries' start lag: nothing while no claim saw a replay; with one, each
 * start's wait on the store's clock (the least offset seen, so a claim that began late does not inflate it), the
 * longest per handler reported every 100 ms, waits under 1 ms left out; a failed report is logged and the next one
 * follows; it stops by itself once no claim has seen a replay for a while.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIVE_LAG_REPORT_MS, LiveLag } from '../../src/dispatcher/live-lag.js';
import type { Logger } from '../../src/index.js';
import type { LiveWait } from '../../src/store/contract.js';
import { pause, waitFor } from '../support/wait.js';

function recording(fail = false) {
  const reports: LiveWait[][] = [];
  const logs: string[] = [];
  const logger: Logger = {
    debug: (message) => logs.push(`debug ${message}`),
    info: (message) => logs.push(`info ${message}`),
    warn() {},
    error() {},
  };
  const lag = new LiveLag(async (waits) => {
    reports.push([...waits]);
    if (fail) throw new Error('connection lost');
  }, logger);
  return { lag, reports, logs };
}

/** The store's clock runs this far ahead of `performance.now()` in these tests. */
const STORE_AHEAD = 1_700_000_000_000;

describe('LiveLag', () => {
  it('measures nothing until a claim sees a replay', async () => {
    const { lag, reports, logs } = recording();
    const now = performance.now();
    lag.claimed(undefined);
    lag.started('h1', new Date(STORE_AHEAD + now - 500), now);
    await pause(LIVE_LAG_REPORT_MS * 2);
    assert.deepEqual(reports, []);
    assert.deepEqual(logs, []);
    lag.stop();
  });

  it("reports each handler's longest wait on the store's clock, the least offset, nothing under 1 ms", async () => {
    const { lag, reports, logs } = recording();
    try {
      const sentAt = performance.now();
      lag.claimed({ storeMs: STORE_AHEAD + sentAt, sentAt });
      // A later claim whose statement began 40 ms late: its offset is not taken.
      lag.claimed({ storeMs: STORE_AHEAD + sentAt + 40, sentAt });
      // Whole ms, as the store's times are.
      const at = Math.ceil(sentAt + 10);
      const dueAgo = (ms: number) => new Date(STORE_AHEAD + at - ms);
      lag.started('h1', dueAgo(30), at);
      lag.started('h1', dueAgo(75), at);
      lag.started('h1', dueAgo(20), at);
      lag.started('h2', dueAgo(0), at);
      lag.started('h3', dueAgo(200), at);
      await waitFor(() => reports.length > 0, 'a report');
      assert.deepEqual(
        reports[0]!.map((w) => [w.handler, Math.round(w.ms)]),
        [
          ['h3', 200],
          ['h1', 75],
        ],
      );
      assert.deepEqual(logs, [
        'info a replay is running: this worker reports how long its live deliveries wait to start',
      ]);
      await pause(LIVE_LAG_REPORT_MS * 2);
      assert.equal(reports.length, 1, 'nothing new started: no report');
    } finally {
      lag.stop();
    }
  });

  it('logs a failed report and sends the next', async () => {
    const { lag, reports, logs } = recording(true);
    try {
      const sentAt = performance.now();
      lag.claimed({ storeMs: STORE_AHEAD + sentAt, sentAt });
      lag.started('h1', new Date(STORE_AHEAD + sentAt - 50), sentAt);
      await waitFor(() => reports.length === 1, 'the first report');
      lag.started('h1', new Date(STORE_AHEAD + sentAt - 60), sentAt);
      await waitFor(() => reports.length === 2, 'the second report');
      assert.ok(logs.includes('debug reporting live start lag failed; the next report follows'));
    } finally {
      lag.stop();
    }
  });

  it('stops by itself once no claim has seen a replay for two seconds', { timeout: 10_000 }, async () => {
    const { lag, reports, logs } = recording();
    const sentAt = performance.now();
    lag.claimed({ storeMs: STORE_AHEAD + sentAt, sentAt });
    await waitFor(() => logs.some((line) => line.startsWith('info no replay is running any more')), 'the stop', 4_000);
    const now = performance.now();
    lag.started('h1', new Date(STORE_AHEAD + now - 500), now);
    await pause(LIVE_LAG_REPORT_MS * 2);
    assert.deepEqual(reports, [], 'a start after the stop is not measured');
  });
});
