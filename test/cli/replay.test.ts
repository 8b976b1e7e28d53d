/**
 * `relaybus replay` as an operator runs it, through the built bin against real Postgres: the dry run writes nothing, a
 * backfill of a new handler runs to its end with each key's history in order while a worker completes the deliveries,
 * the audit record (list, show), a signal stops driving with the replay resumable, resume and cancel, refusals and
 * usage errors with their exit codes.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import * as owners from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { useAdminSchema } from './admin-schema.js';
import { lines, runCli, startCli, useBuiltCli } from './support.js';
import { logIn } from '../support/dashboard-login.js';

const found = await findPostgres();
const TOKEN = 'replay-test-token-0123456789';
useBuiltCli();

describe('relaybus replay (real Postgres, built bin)', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const db = useAdminSchema('cli_replay', 'url' in found ? found.url : '');
  const flags = db.flags;

  /** Events e001..e00n over keys k1 and k2, published while only `publish-to` subscribes. */
  async function publishHistory(count: number): Promise<void> {
    await db.store.subscribe([{ eventType: 'order.placed', handler: 'publish-to', maxAttempts: 3 }]);
    await db.store.transaction((tx) =>
      db.store.publish(
        tx,
        Array.from({ length: count }, (_, i) => ({
          id: `e${String(i + 1).padStart(3, '0')}`,
          type: 'order.placed',
          key: `k${(i % 2) + 1}`,
          payload: { n: i + 1 },
          handlers: [{ name: 'publish-to', maxAttempts: 3 }],
        })),
      ),
    );
  }

  /** A worker of `handler` in the test process: completes what it claims; the event ids per key, in claim order. */
  function worker(handler: string) {
    const byKey = new Map<string, string[]>();
    let running = true;
    const done = (async () => {
      while (running) {
        const claimed = await owners.claim(db.store, {
          owner: `cli-replay-${handler}`,
          handlers: [handler],
          limit: 10,
          leaseDurationMs: 30_000,
        });
        for (const delivery of claimed)
          byKey.set(delivery.key!, [...(byKey.get(delivery.key!) ?? []), delivery.eventId]);
        if (claimed.length > 0)
          await db.store.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
        else await sleep(20);
      }
    })();
    return {
      byKey,
      async stop() {
        running = false;
        await done;
      },
    };
  }

  const subscribe = (handler: string) => db.store.subscribe([{ eventType: 'order.placed', handler, maxAttempts: 3 }]);

  it('a dry run prints the plan per handler and writes nothing; a backfill then runs to its end, in key order', async () => {
    await publishHistory(6);
    await subscribe('update-search');

    const dry = await runCli(['replay', 'backfill', '--handler', 'update-search', '--dry-run', ...flags]);
    assert.equal(dry.code, 0, dry.stderr);
    assert.match(dry.stdout, /selects 6 events/);
    assert.match(dry.stdout, /update-search\s+6/);
    const dryJson = await runCli(['replay', 'backfill', '--handler', 'update-search', '--dry-run', '--json', ...flags]);
    assert.deepEqual(JSON.parse(dryJson.stdout), {
      dryRun: true,
      mode: 'backfill',
      events: 6,
      deliveries: { 'update-search': 6 },
    });
    assert.deepEqual(await db.store.listReplays(), [], 'the dry run wrote nothing');

    const running = worker('update-search');
    const result = await runCli([
      'replay',
      'backfill',
      '--handler',
      'update-search',
      '--reason',
      'new search index',
      '--batch',
      '2',
      '--json',
      ...flags,
    ]);
    await running.stop();
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /started replay \d+ in schema/);
    const json = JSON.parse(lines(result.stdout).at(-1)!) as Record<string, unknown>;
    assert.equal(json.state, 'finished');
    assert.equal(json.mode, 'backfill');
    assert.equal(json.total, 6);
    assert.equal(json.created, 6);
    assert.equal(json.reason, 'new search index');
    assert.match(String(json.requestedBy), /^.+@.+$/);
    assert.equal(typeof json.finishedAt, 'string');
    assert.deepEqual(running.byKey.get('k1'), ['e001', 'e003', 'e005']);
    assert.deepEqual(running.byKey.get('k2'), ['e002', 'e004', 'e006']);

    const again = await runCli(['replay', 'backfill', '--handler', 'update-search', '--dry-run', ...flags]);
    assert.match(again.stdout, /update-search\s+0/, 'a second backfill would create nothing');

    const list = await runCli(['replay', 'list', '--json', ...flags]);
    assert.equal(list.code, 0, list.stderr);
    const listed = JSON.parse(list.stdout) as { id: string; state: string; handlers: string[] }[];
    assert.deepEqual(
      listed.map((replay) => [replay.id, replay.state, replay.handlers]),
      [[json.id, 'finished', ['update-search']]],
    );
    const show = await runCli(['replay', 'show', String(json.id), ...flags]);
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.stdout, /state: +finished/);
    assert.match(show.stdout, /created: +6\/6 deliveries \(skipped 0\)/);
    assert.match(show.stdout, /reason: +new search index/);
    const none = await runCli(['replay', 'list', '--state', 'running', ...flags]);
    assert.match(none.stdout, /no running replay in schema/);
  });

  it('SIGINT stops driving (exit 130) with the replay running; stats shows it; cancel stops it', async () => {
    await subscribe('audit-log');
    const cli = startCli(['replay', 'backfill', '--handler', 'audit-log', '--max-outstanding', '2', ...flags]);
    await cli.waitFor(/started replay (\d+)/);
    const id = /started replay (\d+)/.exec(cli.output().stderr)![1]!;
    // No worker runs audit-log: the replay stops at 2 outstanding deliveries.
    for (let i = 0; i < 100 && (await db.store.getReplay(id))?.created !== 2; i += 1) await sleep(20);
    // publish-to's history deliveries (no worker runs it) already waited at the replay's first look: left out, and said.
    assert.match(cli.output().stderr, /already wait; the replay does not slow down for them.*publish-to/);
    // A live delivery of another handler, due a second ago and started by no worker: the replay yields to it, and says so.
    await db.store.transaction((tx) =>
      db.store.publish(
        tx,
        [{ id: 'live-page', type: 'page.sent', payload: {}, handlers: [{ name: 'pager', maxAttempts: 3 }] }],
        new Date(Date.now() - 1_000),
      ),
    );
    await cli.waitFor(/the replay slows down for them.*pager/);
    cli.child.kill('SIGINT');
    const stopped = await cli.exited;
    assert.equal(stopped.code, 130, stopped.stderr);
    assert.match(stopped.stderr, new RegExp(`relaybus replay resume ${id} drives it on, relaybus replay cancel ${id}`));
    assert.equal((await db.store.getReplay(id))?.state, 'running');

    const stats = await runCli(['stats', '--json', ...flags]);
    assert.equal(stats.code, 0, stats.stderr);
    const replays = (JSON.parse(stats.stdout) as { replays: { id: string; created: number; total: number }[] }).replays;
    assert.deepEqual(
      replays.filter((replay) => replay.id === id).map((replay) => [replay.created, replay.total]),
      [[2, 6]],
    );
    const text = await runCli(['stats', ...flags]);
    assert.match(text.stdout, new RegExp(`replay ${id} \\(backfill of audit-log\\) running: 2/6 created`));

    const refused = await runCli(['replay', 'redrive', '--handler', 'audit-log', ...flags]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, new RegExp(`relaybus: .*${id}`), 'one running replay per handler');

    const cancel = await runCli(['replay', 'cancel', id, ...flags]);
    assert.equal(cancel.code, 0, cancel.stderr);
    assert.match(cancel.stdout, new RegExp(`cancelled replay ${id} .* after 2/6 deliveries`));
    assert.equal((await db.store.getReplay(id))?.state, 'cancelled');
    const twice = await runCli(['replay', 'cancel', id, ...flags]);
    assert.equal(twice.code, 1);
    assert.match(twice.stderr, /is cancelled, not running; nothing changed/);
  });

  it('resume drives a replay started elsewhere to its end', async () => {
    await subscribe('mirror');
    const replay = await db.store.startReplay({ mode: 'backfill', handlers: ['mirror'], key: 'k2' });
    assert.equal(replay.total, 3);
    const running = worker('mirror');
    const result = await runCli(['replay', 'resume', replay.id, '--live-wait', '1s', ...flags]);
    await running.stop();
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, new RegExp(`replay ${replay.id} finished: created 3 deliveries`));
    assert.deepEqual(running.byKey.get('k2'), ['e002', 'e004', 'e006']);
    const finished = await runCli(['replay', 'resume', replay.id, ...flags]);
    assert.equal(finished.code, 1);
    assert.match(finished.stderr, /is finished, not running; there is nothing to resume/);
  });

  it('the dashboard lists a running replay and cancels it behind the token and CSRF checks', async () => {
    await subscribe('dash');
    const replay = await db.store.startReplay({ mode: 'backfill', handlers: ['dash'], requestedBy: 'ops@host' });
    await db.store.replayStep({ replayId: replay.id, limit: 1 });
    const cli = startCli(['dashboard', '--port', '0', '--host', '0.0.0.0', '--token', TOKEN, ...flags]);
    try {
      await cli.waitFor(/relaybus dashboard on http:\/\/\S+/);
      const address = /relaybus dashboard on (http:\/\/\S+) /
        .exec(cli.output().stdout)![1]!
        .replace('0.0.0.0', '127.0.0.1');
      const { cookie, html, csrf } = await logIn(address, TOKEN);
      assert.match(html, /<table id="replays">/);
      const overview = (await (await fetch(`${address}/api/overview`, { headers: { cookie } })).json()) as {
        replays: { id: string; created: number; total: number; requestedBy: string; undriven: boolean }[];
      };
      assert.deepEqual(
        overview.replays.filter((entry) => entry.id === replay.id),
        [
          {
            ...overview.replays.find((entry) => entry.id === replay.id)!,
            created: 1,
            total: 6,
            requestedBy: 'ops@host',
            undriven: false,
          },
        ],
      );
      const post = async (body: unknown, headers: Record<string, string>) =>
        (
          await fetch(`${address}/api/replay/cancel`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...headers },
            body: JSON.stringify(body),
          })
        ).status;
      const session = { cookie, 'x-relaybus-csrf': csrf };
      assert.equal(await post({ replayId: replay.id }, {}), 401, 'no token');
      assert.equal(await post({ replayId: replay.id }, { cookie }), 403, 'no CSRF token');
      assert.equal((await db.store.getReplay(replay.id))?.state, 'running', 'refused requests change nothing');
      assert.equal(await post({ replayId: 7 }, session), 400);
      assert.equal(await post({ replayId: '999999' }, session), 404);
      assert.equal(await post({ replayId: replay.id }, session), 200);
      assert.equal((await db.store.getReplay(replay.id))?.state, 'cancelled');
      assert.equal(await post({ replayId: replay.id }, session), 409, 'not running any more');
    } finally {
      cli.child.kill('SIGINT');
      await cli.exited;
    }
  });

  it('refuses a type the handler does not subscribe to, and bad command lines (exit 2)', async () => {
    await subscribe('typed');
    const type = await runCli(['replay', 'backfill', '--handler', 'typed', '--type', 'order.shipped', ...flags]);
    assert.equal(type.code, 1);
    assert.match(type.stderr, /^relaybus: .*order\.shipped/m);

    const usage: [string[], RegExp][] = [
      [['replay', 'backfill'], /needs --handler <name>/],
      [['replay', 'backfill', '--handler', 'h', '--since', 'yesterday'], /--since must be an ISO 8601 time/],
      [['replay', 'backfill', '--handler', 'h', '--batch', '0'], /--batch must be an integer from 1 to 10000/],
      [['replay', 'backfill', '--handler', 'h', '--rate', '0'], /--rate/],
      [['replay', 'backfill', '--handler', 'h', '--live-wait', 'soon'], /--live-wait must be a duration/],
      [
        ['replay', 'backfill', '--handler', 'h', '--live-wait', '2h'],
        /--live-wait must be between 1 ms and 3600000 ms/,
      ],
      [['replay', 'show', 'abc'], /the replay id must be a positive number/],
      [['replay', 'cancel'], /needs the replay id/],
      [['replay', 'list', '--state', 'done'], /--state must be one of running, finished, cancelled/],
      [['replay'], /relaybus replay needs a subcommand/],
    ];
    for (const [args, message] of usage) {
      const result = await runCli([...args, ...flags]);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
      assert.match(result.stderr, message);
    }
    const unknown = await runCli(['replay', 'show', '999999', ...flags]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no replay 999999 in schema/);
  });
});
