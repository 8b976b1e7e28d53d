/**
 * `relaybus inbox` (the real CLI, from source) keeps the worker's conventions: --help and usage
 * errors (exit 2), a config without an inbox (exit 2), a queue that does not exist (exit 1, named),
 * a broker that is down at start (retried with a log line per attempt; SIGTERM then exits 0), and a
 * running inbox stopped by SIGTERM (exit 0).
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { useInboxCli } from './processes.js';
import { rabbitSkip, uniqueName } from './support.js';

const skip = await rabbitSkip();
const CONFIG = fileURLToPath(new URL('./fixtures/cli.config.ts', import.meta.url));

describe('relaybus inbox', { skip }, () => {
  const cli = useInboxCli('inbox_cli');
  const run = cli.run;

  it('--help lists its flags; a bad flag and a config without an inbox are usage errors (exit 2)', {
    timeout: 30_000,
  }, async () => {
    const help = run('help', ['inbox', '--help']);
    assert.equal((await help.waitForExit(15_000)).code, 0);
    for (const flag of ['--grace', '--log-level', '--log-format', '--verbose'])
      assert.ok(help.stdout.includes(flag), flag);
    const bad = run('bad', ['inbox', CONFIG, '--bogus']);
    assert.equal((await bad.waitForExit(15_000)).code, 2);
    const none = run('none', ['inbox', CONFIG], { RB_CLI_CASE: 'no-inbox' });
    assert.equal((await none.waitForExit(15_000)).code, 2);
    assert.match(none.stderr, /exports no inbox/);
  });

  it('a queue that does not exist exits 1 naming it; a broker that is down at start is retried until SIGTERM (exit 0)', {
    timeout: 30_000,
  }, async () => {
    const missing = run('missing', ['inbox', CONFIG], { RB_CLI_CASE: 'missing-queue' });
    assert.equal((await missing.waitForExit(15_000)).code, 1);
    assert.match(missing.stderr, /relaybus-test-no-such-queue.*does not exist/);
    const down = run('down', ['inbox', CONFIG], { RB_CLI_CASE: 'down' });
    const deadline = Date.now() + 15_000;
    while (!/could not start; starting again after a backoff/.test(down.stderr) && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 50));
    assert.match(down.stderr, /RabbitMQ at amqp:\/\/guest:\*\*\*@127\.0\.0\.1:1 cannot be reached/);
    down.signal('SIGTERM');
    assert.equal((await down.waitForExit(10_000)).code, 0);
  });

  it('runs until SIGTERM, then stops gracefully (exit 0)', { timeout: 30_000 }, async () => {
    const queue = uniqueName('cli');
    cli.admin.track('queue', queue);
    const first = run('first', ['inbox', CONFIG], { RB_CLI_CASE: 'ok', RB_QUEUE: queue });
    await first.waitFor(/running 1 inbox/, 'running', 20_000);
    first.signal('SIGTERM');
    assert.equal((await first.waitForExit(10_000)).code, 0);
    assert.match(first.stdout, /stopped; committed 0 messages: 0 new events, 0 already seen; 0 dead-lettered/);
  });
});
