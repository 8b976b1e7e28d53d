/**
 * `relaybus handlers pause|resume|list` as an operator runs them, through the built bin against real Postgres: a pause
 * that the store's claims honour at once, the answers and exit codes (already paused: 0; not paused: 1), `--json`,
 * and `relaybus stats` marking the paused handler.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as owners from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { useAdminSchema } from './admin-schema.js';
import { lines, runCli, useBuiltCli } from './support.js';

const found = await findPostgres();
useBuiltCli();

describe('relaybus handlers (real Postgres, built bin)', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const db = useAdminSchema('cli_handlers', 'url' in found ? found.url : '');
  const flags = db.flags;

  async function publish(id: string, handlers: readonly string[]): Promise<void> {
    await db.store.transaction((tx) =>
      db.store.publish(tx, [
        {
          id,
          type: 'order.placed',
          key: `customer-${id}`,
          payload: { id },
          handlers: handlers.map((name) => ({ name, maxAttempts: 3 })),
        },
      ]),
    );
  }

  const claim = async (owner: string): Promise<string[]> =>
    (
      await owners.claim(db.store, {
        owner,
        handlers: ['send-sms', 'update-ledger'],
        limit: 10,
        leaseDurationMs: 30_000,
      })
    ).map((c) => `${c.eventId}/${c.handler}`);

  it('pause stops every claim of the handler at once, other handlers keep flowing; resume lets them run', async () => {
    const paused = await runCli(['handlers', 'pause', 'send-sms', '--reason', 'SMS provider outage', ...flags]);
    assert.equal(paused.code, 0, paused.stderr);
    assert.match(paused.stdout, /^paused send-sms in schema "[^"]+": no worker claims its deliveries/);

    await publish('o-1', ['send-sms', 'update-ledger']);
    assert.deepEqual(await claim('cli-a'), ['o-1/update-ledger']);
    assert.deepEqual(await claim('cli-b'), []);

    const again = await runCli(['handlers', 'pause', 'send-sms', '--reason', 'other', ...flags]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /^send-sms was already paused \(since \S+: SMS provider outage\); nothing changed/);

    const list = await runCli(['handlers', 'list', ...flags]);
    assert.equal(list.code, 0, list.stderr);
    assert.equal(lines(list.stdout).length, 2, list.stdout);
    assert.match(lines(list.stdout)[1]!, /^send-sms\s+\S+Z\s+\S+\s+SMS provider outage$/);
    const json = await runCli(['handlers', 'list', '--json', ...flags]);
    assert.equal(json.code, 0, json.stderr);
    const listed = JSON.parse(json.stdout) as { handler: string; pausedAt: string; reason: string | null }[];
    assert.deepEqual(
      listed.map((p) => [p.handler, p.reason]),
      [['send-sms', 'SMS provider outage']],
    );
    assert.ok(!Number.isNaN(Date.parse(listed[0]!.pausedAt)));

    const resumed = await runCli(['handlers', 'resume', 'send-sms', ...flags]);
    assert.equal(resumed.code, 0, resumed.stderr);
    assert.match(resumed.stdout, /^resumed send-sms/);
    // cli-a holds the event's lane (its update-ledger delivery runs there): its next claim brings the other one.
    assert.deepEqual(await claim('cli-a'), ['o-1/send-sms']);
    const none = await runCli(['handlers', 'list', ...flags]);
    assert.match(none.stdout, /^no paused handler in schema/);
  });

  it('relaybus stats marks a paused handler, in text and with "paused": true in --json', async () => {
    await publish('o-2', ['send-sms', 'update-ledger']);
    assert.equal((await runCli(['handlers', 'pause', 'send-sms', ...flags])).code, 0);
    try {
      const text = await runCli(['stats', ...flags]);
      assert.equal(text.code, 0, text.stderr);
      assert.ok(
        lines(text.stdout).some((line) => /^send-sms \(paused\)\s/.test(line)),
        text.stdout,
      );
      assert.ok(lines(text.stdout).some((line) => /^update-ledger\s/.test(line)));
      assert.match(text.stdout, /paused: send-sms: no worker claims its deliveries/);

      const json = await runCli(['stats', '--json', ...flags]);
      assert.equal(json.code, 0, json.stderr);
      const stats = JSON.parse(json.stdout) as {
        paused: string[];
        handlers: Record<string, { pending: number; paused?: boolean }>;
      };
      assert.deepEqual(stats.paused, ['send-sms']);
      assert.equal(stats.handlers['send-sms']?.paused, true);
      assert.ok(!('paused' in stats.handlers['update-ledger']!), 'only the paused handler carries the field');
    } finally {
      await db.store.resumeHandler({ handler: 'send-sms' });
    }
  });

  it('resume of a handler that is not paused fails (exit 1, nothing changed); usage errors exit 2', async () => {
    const resume = await runCli(['handlers', 'resume', 'never-paused', '--json', ...flags]);
    assert.equal(resume.code, 1);
    assert.deepEqual(JSON.parse(resume.stdout), { handler: 'never-paused', resumed: false });
    assert.match(resume.stderr, /^relaybus: never-paused is not paused in schema "[^"]+"; nothing changed/);

    const pauseJson = await runCli(['handlers', 'pause', 'send-fax', '--json', ...flags]);
    assert.equal(pauseJson.code, 0, pauseJson.stderr);
    const body = JSON.parse(pauseJson.stdout) as { handler: string; paused: boolean; reason: string | null };
    assert.deepEqual([body.handler, body.paused, body.reason], ['send-fax', true, null]);
    assert.equal((await runCli(['handlers', 'resume', 'send-fax', ...flags])).code, 0);

    for (const args of [
      ['handlers'],
      ['handlers', 'pause'],
      ['handlers', 'resume'],
      ['handlers', 'pause', 'a', 'b'],
      ['handlers', 'pause', 'a', '--reason', ' '],
      ['handlers', 'stop', 'a'],
    ]) {
      const result = await runCli([...args, ...flags]);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
      assert.match(result.stderr, /^relaybus: /);
    }
    assert.deepEqual(await db.store.listPausedHandlers(), []);
  });
});
