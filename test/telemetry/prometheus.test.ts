/**
 * The worker's Prometheus registry renders what Prometheus parses (names, units, `_total`,
 * cumulative buckets, escaped label values), and the W3C trace context reader refuses malformed
 * `traceparent` values instead of linking to a bogus trace.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PrometheusRegistry, prometheusName } from '../../src/telemetry/prometheus.js';
import { formatTraceParent, parseTraceParent } from '../../src/telemetry/trace-context.js';
import { parseSamples, sampleValue } from './prom-text.js';

describe('PrometheusRegistry', () => {
  it('renders counters, histograms and gauges with escaped labels', async () => {
    const registry = new PrometheusRegistry();
    const counter = registry.createCounter('relaybus.deliveries', { description: 'runs\nby outcome' });
    counter.add(2, { handler: 'a"b\\c\nd', outcome: 'completed' });
    counter.add(1, { handler: 'a"b\\c\nd', outcome: 'completed' });
    counter.add(-5, { handler: 'x' }); // ignored: a counter only grows
    const histogram = registry.createHistogram('relaybus.handler.duration', {
      unit: 's',
      advice: { explicitBucketBoundaries: [0.1, 1] },
    });
    for (const value of [0.05, 0.5, 5]) histogram.record(value, { handler: 'h' });
    let level = 7;
    registry
      .createObservableGauge('relaybus.backlog.due')
      .addCallback((result) => result.observe(level, { handler: 'h' }));

    const text = await registry.render();
    assert.match(text, /^# HELP relaybus_deliveries_total runs\\nby outcome$/m);
    assert.match(text, /^# TYPE relaybus_handler_duration_seconds histogram$/m);
    const samples = parseSamples(text);
    assert.equal(sampleValue(samples, 'relaybus_deliveries_total', { handler: 'a"b\\c\nd', outcome: 'completed' }), 3);
    assert.equal(samples.filter((sample) => sample.name === 'relaybus_deliveries_total').length, 1);
    assert.deepEqual(
      ['0.1', '1', '+Inf'].map((le) =>
        sampleValue(samples, 'relaybus_handler_duration_seconds_bucket', { handler: 'h', le }),
      ),
      [1, 2, 3],
      'buckets are cumulative',
    );
    assert.equal(sampleValue(samples, 'relaybus_handler_duration_seconds_sum', { handler: 'h' }), 5.55);
    assert.equal(sampleValue(samples, 'relaybus_handler_duration_seconds_count', { handler: 'h' }), 3);
    assert.equal(sampleValue(samples, 'relaybus_backlog_due', { handler: 'h' }), 7);
    level = 0;
    assert.equal(
      sampleValue(parseSamples(await registry.render()), 'relaybus_backlog_due', { handler: 'h' }),
      0,
      'gauges are read at each scrape',
    );
  });

  it('names instruments as the OpenTelemetry Prometheus exporter does', () => {
    assert.equal(prometheusName('relaybus.claim.duration', 'histogram', 's'), 'relaybus_claim_duration_seconds');
    assert.equal(prometheusName('relaybus.lease.renewals', 'counter', '{lane}'), 'relaybus_lease_renewals_total');
    assert.equal(prometheusName('9lives', 'gauge', undefined), '_9lives');
  });
});

describe('W3C trace context in headers', () => {
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const spanId = '00f067aa0ba902b7';

  it('reads what it writes, with tracestate', () => {
    const traceparent = formatTraceParent({ traceId, spanId, traceFlags: 1 });
    assert.equal(traceparent, `00-${traceId}-${spanId}-01`);
    assert.deepEqual(parseTraceParent({ traceparent, tracestate: 'vendor=x' }), {
      traceId,
      spanId,
      traceFlags: 1,
      traceState: 'vendor=x',
    });
  });

  it('refuses malformed or invalid values', () => {
    for (const traceparent of [
      'garbage',
      `00-${traceId}-${spanId}`,
      `ff-${traceId}-${spanId}-01`,
      `00-${'0'.repeat(32)}-${spanId}-01`,
      `00-${traceId}-${'0'.repeat(16)}-01`,
      `00-${traceId.toUpperCase()}-${spanId}-01`,
      `00-${traceId}-${spanId}-01-extra`,
    ]) {
      assert.equal(parseTraceParent({ traceparent }), undefined, traceparent);
    }
    assert.equal(parseTraceParent({}), undefined);
  });
});
