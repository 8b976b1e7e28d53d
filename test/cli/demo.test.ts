/**
 * `relaybus demo` as a newcomer runs it (the built bin, output to a pipe): it needs no server, exits
 * 0, and prints its summary: progress lines, statistics, the one dead letter, per-key order and the
 * write evidence. A smaller run (`--events 300`) keeps the test short; PGlite's start is most of it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runCli, useBuiltCli } from './support.js';

useBuiltCli();

describe('relaybus demo (embedded PGlite, built bin)', () => {
  it('runs the delivery path with no server and prints its summary', { timeout: 90_000 }, async () => {
    const started = performance.now();
    const result = await runCli(['demo', '--events', '300'], { env: { DATABASE_URL: undefined }, timeoutMs: 80_000 });
    const seconds = (performance.now() - started) / 1000;
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    assert.equal(result.stderr, '');
    const out = result.stdout;
    assert.match(
      out,
      /^relaybus demo: 300 keyed order events \(43 customers\) x 3 handlers \(send-receipt, reserve-stock, update-ledger\)/,
    );
    assert.match(out, /published 300 events \(900 deliveries\) in 1 transaction/);
    assert.match(
      out,
      /^ {2}delivering \[#+\] 900\/900 {2}retries 8 {2}dead 1 {2}[\d.]+ s$/m,
      'a plain final progress line (not a TTY)',
    );
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the escape character is what this looks for
    assert.doesNotMatch(out, /\r|\x1b\[/, 'no terminal control sequences in a pipe');
    assert.match(out, /delivered 899 and dead-lettered 1 of 900 deliveries/);
    assert.match(out, /per-key order: 0 violations/);
    assert.match(out, /^ {2}send-receipt +0 +0 +0 +0 +1 +-$/m, 'statistics: only the dead letter is left');
    assert.match(
      out,
      /delivery \d+: send-receipt for order\.placed \(key customer-\d+\) after 3\/3 attempts: Error: the mail server rejected/,
    );
    assert.match(
      out,
      /^ {2}relaybus_deliveries +900 +9 +\d+ +899$/m,
      'every delivery inserted once; updated only by its failures',
    );
    assert.match(out, /deliveries: 900 inserted, 899 deleted, 9 updated = 0\.010 updates per delivery/);
    assert.match(out, /lanes: [\d,]+ updates \([\d.]+ per delivery\), 100% HOT/);
    assert.match(out, /relaybus demo: done in [\d.]+ s\n$/);
    assert.ok(seconds < 60, `took ${seconds.toFixed(1)} s`);
  });

  it('rejects a bad --events value with one line', { timeout: 30_000 }, async () => {
    const result = await runCli(['demo', '--events', '5']);
    assert.equal(result.code, 2);
    assert.equal(result.stderr, 'relaybus: --events must be an integer from 10 to 100000, got "5"\n');
  });
});
