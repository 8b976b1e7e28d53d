import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogFields, Logger } from '../../src/core/logger.js';
import { ActivityReport } from '../../src/dispatcher/activity-report.js';

function recordingLogger(): { logger: Logger; lines: { message: string; fields?: LogFields }[] } {
  const lines: { message: string; fields?: LogFields }[] = [];
  const info = (message: string, fields?: LogFields) => lines.push({ message, ...(fields ? { fields } : {}) });
  const ignore = () => {};
  return { logger: { debug: ignore, info, warn: ignore, error: ignore }, lines };
}

describe('dispatcher: activity report', () => {
  it('says when the first deliveries start, then once per period with work, and nothing while idle', () => {
    const { logger, lines } = recordingLogger();
    const report = new ActivityReport(logger, 1_000);
    report.maybeReport(0, 0);
    assert.equal(lines.length, 0, 'nothing started: nothing to say');
    report.started(3);
    report.started(3);
    report.started(7);
    report.maybeReport(10, 3);
    assert.deepEqual(lines, [{ message: 'first deliveries claimed', fields: { deliveries: 3, lanes: 2, running: 3 } }]);
    report.started(9);
    report.maybeReport(500, 1);
    assert.equal(lines.length, 1, 'within the period: quiet');
    report.maybeReport(1_010, 1);
    assert.deepEqual(lines[1], {
      message: 'working',
      fields: { deliveriesStarted: 1, lanes: 1, running: 1, periodMs: 1_000 },
    });
    report.maybeReport(5_000, 0);
    assert.equal(lines.length, 2, 'a period without work says nothing');
  });
});
