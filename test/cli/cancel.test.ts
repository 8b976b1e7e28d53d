/**
 * `relaybus cancel` as an operator runs it, through the built bin against real Postgres: a scheduled event cancelled
 * before it is due, the answer for each handler (cancelled, running, finished), the exit codes, and `--json`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as owners from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { useAdminSchema } from './admin-schema.js';
import { lines, runCli, useBuiltCli } from './support.js';

const found = await findPostgres();
useBuiltCli();

describe('relaybus cancel (real Postgres, built bin)', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const db = useAdminSchema('cli_cancel', 'url' in found ? found.url : '');
  const flags = db.flags;

  async function publish(id: string, handlers: readonly string[], availableAt?: Date): Promise<void> {
    await db.store.transaction((tx) =>
      db.store.publish(tx, [
        {
          id,
          type: 'reminder.due',
          key: `customer-${id}`,
          payload: { id },
          handlers: handlers.map((name) => ({ name, maxAttempts: 3 })),
          ...(availableAt ? { availableAt } : {}),
        },
      ]),
    );
  }

  const pendingOf = async (id: string): Promise<number> =>
    (await db.store.listDeliveries({ eventId: id, status: 'pending' })).items.length;

  it('cancels a scheduled event before it is due: every handler told, exit 0; asked again: already finished, exit 1', async () => {
    await publish('reminder-1', ['send-sms', 'send-email'], new Date(Date.now() + 3_600_000));
    const result = await runCli(['cancel', '--event-id', 'reminder-1', ...flags]);
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(
      lines(result.stdout)
        .map((line) => line.replace(/ \(delivery \d+\)/, ''))
        .sort(),
      ['send-email: cancelled: it will not run', 'send-sms: cancelled: it will not run'],
    );
    assert.equal(await pendingOf('reminder-1'), 0);

    const again = await runCli(['cancel', '--event-id', 'reminder-1', ...flags]);
    assert.equal(again.code, 1);
    assert.match(again.stdout, /send-sms: nothing to cancel: it already ran \(or was cancelled before\)/);
    assert.match(again.stderr, /relaybus: 2 of the 2 deliveries of event reminder-1 could not be cancelled/);
  });

  it('leaves a delivery a worker runs, says so and exits 1; cancels the other handler', async () => {
    await publish('order-2', ['update-ledger', 'send-receipt']);
    const claimed = await owners.claim(db.store, {
      owner: 'cli-cancel',
      handlers: ['update-ledger'],
      limit: 10,
      leaseDurationMs: 30_000,
    });
    assert.equal(claimed.length, 1);
    const result = await runCli(['cancel', '--event-id', 'order-2', '--json', ...flags]);
    assert.equal(result.code, 1);
    const json = JSON.parse(lines(result.stdout)[0]!) as {
      eventId: string;
      found: boolean;
      deliveries: { handler: string; outcome: string; deliveryId: string | null }[];
    };
    assert.equal(json.eventId, 'order-2');
    assert.equal(json.found, true);
    assert.deepEqual(json.deliveries.map((d) => `${d.handler}:${d.outcome}`).sort(), [
      'send-receipt:cancelled',
      'update-ledger:running',
    ]);
    assert.equal(json.deliveries.find((d) => d.outcome === 'running')?.deliveryId, claimed[0]!.id);
    assert.match(result.stderr, /1 of the 2 deliveries of event order-2 could not be cancelled/);
    assert.deepEqual(
      (await db.store.listDeliveries({ eventId: 'order-2' })).items.map((d) => `${d.handler}:${d.status}`),
      ['update-ledger:processing'],
      'the running delivery is still there, the other is gone',
    );
  });

  it('--handler cancels one handler only; an unknown event and a missing --event-id are refused', async () => {
    await publish('order-3', ['update-ledger', 'send-receipt']);
    const one = await runCli(['cancel', '--event-id', 'order-3', '--handler', 'send-receipt', ...flags]);
    assert.equal(one.code, 0, one.stderr);
    assert.deepEqual(
      (await db.store.listDeliveries({ eventId: 'order-3' })).items.map((d) => d.handler),
      ['update-ledger'],
    );

    const unknown = await runCli(['cancel', '--event-id', 'no-such-event', ...flags]);
    assert.equal(unknown.code, 1);
    assert.match(
      unknown.stderr,
      /no event no-such-event in schema "[^"]+": the id is unknown, retention purged it, or it was published without an id/,
    );

    const usage = await runCli(['cancel', ...flags]);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /needs --event-id/);
  });
});
