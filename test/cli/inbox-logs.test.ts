/**
 * `relaybus inbox` and the inbox's own log lines: an inbox whose config gave no logger logs through
 * the CLI's, so --log-level and --log-format reach its lines (they were dropped before); one whose
 * config gave a logger keeps it. The committed lines say what happened in words a reader follows:
 * `committed 1 message: 0 new events, 1 already seen` for a redelivery.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import pg from 'pg';
import { amqpInbox } from '../../src/amqp/index.js';
import { lendInboxLogger } from '../../src/broker/inbox-logger.js';
import { createRelayBus, type Logger } from '../../src/index.js';
import { fromPg, postgresStore } from '../../src/postgres/index.js';
import { useInboxCli } from '../broker/processes.js';
import { AMQP_URL, rabbitSkip, uniqueName } from '../broker/support.js';
import { ItemCreated } from '../broker/fixtures/bridge-shared.js';

const skip = await rabbitSkip();
const CONFIG = fileURLToPath(new URL('../broker/fixtures/cli.config.ts', import.meta.url));

/** A logger that keeps its lines. */
function recording(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const write = (level: string) => (message: string) => void lines.push(`${level} ${message}`);
  return { lines, debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}

describe('lendInboxLogger', () => {
  it("lends a logger to an inbox made without one, and leaves an inbox's own logger alone", async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://127.0.0.1:1/none' });
    const bus = createRelayBus({ store: postgresStore({ driver: fromPg(pool) }), events: [ItemCreated] });
    const own = recording();
    const lent = recording();
    const bare = amqpInbox({ bus, url: AMQP_URL, queue: 'q', events: [ItemCreated] });
    const withOwn = amqpInbox({ bus, url: AMQP_URL, queue: 'q', events: [ItemCreated], logger: own });
    assert.equal(lendInboxLogger(bare, lent), true);
    assert.equal(lendInboxLogger(withOwn, lent), false);
    await pool.end();
  });
});

describe('relaybus inbox: its log lines', { skip }, () => {
  const cli = useInboxCli('inbox_logs');
  const run = cli.run;

  it("the inbox's own lines go through the CLI's logger: its format, its level", { timeout: 60_000 }, async () => {
    const queue = uniqueName('logs');
    cli.admin.track('queue', queue);
    const json = run('json', ['inbox', CONFIG, '--log-format', 'json'], { RB_CLI_CASE: 'ok', RB_QUEUE: queue });
    await json.waitFor(/running 1 inbox/, 'running', 20_000);
    const consuming = json.stdout.split('\n').find((line) => line.includes(`consuming amqp queue ${queue}`));
    assert.ok(consuming, `the inbox's own "consuming" line, in the CLI's output:\n${json.stdout}`);
    assert.equal((JSON.parse(consuming) as { level: string }).level, 'info');
    json.signal('SIGTERM');
    assert.equal((await json.waitForExit(10_000)).code, 0);

    const quiet = run('quiet', ['inbox', CONFIG, '--log-level', 'warn'], { RB_CLI_CASE: 'ok', RB_QUEUE: queue });
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    quiet.signal('SIGTERM');
    assert.equal((await quiet.waitForExit(10_000)).code, 0);
    assert.equal(quiet.stdout, '', 'nothing below warn');
  });

  it('--verbose: "committed 1 message: 1 new event, 0 already seen", then "0 new events, 1 already seen" for a redelivery', {
    timeout: 60_000,
  }, async () => {
    const queue = uniqueName('seen');
    cli.admin.track('queue', queue);
    const inbox = run('seen', ['inbox', CONFIG, '--verbose'], { RB_CLI_CASE: 'ok', RB_QUEUE: queue });
    await inbox.waitFor(/running 1 inbox/, 'running', 20_000);
    const message = { body: JSON.stringify({ n: 1 }), messageId: 'seen-1', type: ItemCreated.type };
    await cli.admin.publish(queue, [message]);
    await inbox.waitFor(/committed 1 message: 1 new event, 0 already seen/, 'the first commit', 20_000);
    await cli.admin.publish(queue, [message]);
    await inbox.waitFor(/committed 1 message: 0 new events, 1 already seen/, 'the redelivery', 20_000);
    // A poison message (no id) is said once, by the inbox itself, not again by the CLI.
    await cli.admin.publish(queue, [{ body: JSON.stringify({ n: 2 }), type: ItemCreated.type }]);
    const deadline = Date.now() + 20_000;
    while (!/dead-lettered/.test(inbox.stderr) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await new Promise((resolve) => setTimeout(resolve, 500));
    inbox.signal('SIGTERM');
    assert.equal((await inbox.waitForExit(10_000)).code, 0);
    assert.equal(inbox.stderr.split('\n').filter((line) => line.includes('dead-lettered')).length, 1, inbox.stderr);
    assert.match(inbox.stdout, /stopped; committed 2 messages: 1 new event, 1 already seen; 1 dead-lettered/);
  });
});
