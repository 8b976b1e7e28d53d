/**
 * The dashboard's payload text (src/cli/dashboard/payload.ts): indented JSON, cut past
 * MAX_PAYLOAD_CHARS with a note saying how long it is and where to read it whole, so a page of
 * dead letters stays small whatever their events hold.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { deliveryJson, MAX_PAYLOAD_CHARS, payloadText } from '../../src/cli/dashboard/payload.js';

describe('dashboard payload text', () => {
  it('is the indented JSON of the payload, a JSON null included', () => {
    assert.equal(payloadText({ note: '<script>' }), '{\n  "note": "<script>"\n}');
    assert.equal(payloadText(null), 'null');
  });

  it('is cut past MAX_PAYLOAD_CHARS, saying how long it is and where to read it whole', () => {
    const text = payloadText({ blob: 'x'.repeat(MAX_PAYLOAD_CHARS * 2) });
    const whole = JSON.stringify({ blob: 'x'.repeat(MAX_PAYLOAD_CHARS * 2) }, null, 2).length;
    assert.ok(text.startsWith('{\n  "blob": "xxx'));
    assert.equal(
      text.slice(MAX_PAYLOAD_CHARS),
      `\n… cut: ${whole.toLocaleString('en-US')} characters in all (relaybus dead list --json prints it whole)`,
    );
  });

  it('gives a delivery listed without its payload (or whose event is gone) payload and headers null', () => {
    const view = {
      id: '1',
      eventId: 'e',
      eventType: 't',
      handler: 'h',
      key: null,
      sequence: null,
      lane: 3,
      status: 'dead' as const,
      attempts: 1,
      maxAttempts: 1,
      availableAt: new Date(0),
      lastError: 'x',
      createdAt: new Date(0),
      updatedAt: new Date(0),
    };
    assert.deepEqual([deliveryJson(view).payload, deliveryJson(view).headers], [null, null]);
    const listed = deliveryJson({ ...view, payload: { a: 1 }, headers: { h: 'v' } });
    assert.deepEqual(
      [listed.payload, listed.headers, listed.updatedAt],
      ['{\n  "a": 1\n}', { h: 'v' }, '1970-01-01T00:00:00.000Z'],
    );
  });
});
