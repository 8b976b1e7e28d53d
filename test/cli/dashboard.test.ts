/**
 * `relaybus dashboard` (built bin, real Postgres):
 * - in headless Chromium (Debian's `chromium`, driven by playwright-core; skipped, saying why, when
 *   there is no browser): the page loads and shows the numbers of `relaybus stats --json` for the
 *   same database; an error text, a key and an event id holding `<script>` and an `<img onerror>`
 *   are shown as text and run nothing, in a dead letter's payload too; the event search shows an
 *   event's payload and its deliveries with the completion history; requeue through the page works
 *   and the delivery then runs; Pause and Resume in a handler's row pause and resume it, and a pause
 *   reason holding `<script>` is shown as text; a token-protected dashboard asks for the token, works
 *   after logging in, and logs out; without completion history the completed column says n/a, and why.
 * - over plain HTTP: a non-local bind without a token and a short token are refused (exit 2); POSTs
 *   without the token, without the CSRF token, or from another origin are refused and change
 *   nothing; pause and resume through the API work (with a bearer token too) behind the same checks,
 *   a bad body is a 400 and resuming a handler that is not paused a 409; a logout from another origin
 *   (another port) or without the session's CSRF token is refused and the session survives; a foreign
 *   Host header on a loopback bind is refused; a port in use is one clear error; dead letters and a
 *   found event carry their payload and headers (an event published inline too).
 *
 * RELAYBUS_SCREENSHOTS=1 writes docs/public/dashboard.png and docs/public/dashboard-login.png.
 */
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { BrowserContext, Page } from 'playwright-core';
import { browserSkip, launchChromium } from '../support/chromium.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { waitFor } from '../support/wait.js';
import { REPO, runCli, startCli, useBuiltCli, type RunningCli } from './support.js';
import * as owners from '../support/claims.js';
import { logIn as logInWith } from '../support/dashboard-login.js';

const found = await findPostgres();
useBuiltCli();

const TOKEN = 'test-token-0123456789abcdef';
const XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">';
const Order = defineEvent('order.placed', Type.Object({ note: Type.String() }));

async function startDashboard(
  args: readonly string[],
  env: Record<string, string | undefined> = {},
): Promise<{ cli: RunningCli; url: string }> {
  const cli = startCli(['dashboard', '--port', '0', ...args], { env });
  await cli.waitFor(/relaybus dashboard on http:\/\/\S+/);
  const url = /relaybus dashboard on (http:\/\/\S+) /.exec(cli.output().stdout)![1]!.replace('0.0.0.0', '127.0.0.1');
  return { cli, url };
}

/** Log in with the suite's token as the login form does. */
const logIn = (address: string) => logInWith(address, TOKEN);

async function stop(cli: RunningCli): Promise<void> {
  cli.child.kill('SIGINT');
  const result = await cli.exited;
  assert.equal(result.code, 0, result.stderr);
}

describe('relaybus dashboard (real Postgres, built bin)', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('cli_dashboard');
  const dbFlags = ['--database-url', url, '--schema', schema];
  // A schema whose workers keep no completion history, with one dead letter of an event published inline.
  const plainSchema = uniqueSchemaName('cli_dashboard_plain');
  const plainFlags = ['--database-url', url, '--schema', plainSchema];
  const INLINE_PAYLOAD = { note: `inline ${XSS}` };
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  let riskyWorks = false;
  const ran: string[] = [];
  let eventId = '';

  function makeBus() {
    const bus = createRelayBus({ store, events: [Order], dispatcher: { pollIntervalMs: 20 } });
    bus.on(Order, 'email', () => {});
    bus.on(Order, 'risky', { maxAttempts: 1 }, (order, ctx) => {
      if (!riskyWorks) throw new Error(`cannot charge ${JSON.stringify(order)}`);
      ran.push(ctx.delivery.id);
    });
    return bus;
  }

  async function deadIds(): Promise<string[]> {
    const page = await store.listDeliveries({ status: 'dead' });
    return page.items.map((item) => item.id);
  }

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 4 });
    store = postgresStore({ driver: fromPg(pool), schema, completionHistory: true });
    await store.setup();
    const bus = makeBus();
    eventId = `<b>evt</b>-${XSS}`.slice(0, 200);
    await store.transaction((tx) =>
      bus.publish(tx, Order, { note: XSS }, { id: eventId, key: `<i>key</i>${XSS}`.slice(0, 200) }),
    );
    await store.transaction((tx) => bus.publish(tx, Order, { note: 'second' }));
    await bus.start();
    await waitFor(
      async () => (await store.statistics()).pending === 0 && (await store.statistics()).inFlight === 0,
      'the first run is over',
      10_000,
    );
    await bus.stop();
    // A backlog for the table and the chart: published, not run.
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        Array.from({ length: 5 }, (_, n) => ({ event: Order, payload: { note: `later ${n}` } })),
      ),
    );
    assert.equal((await deadIds()).length, 2, 'two dead letters of risky');

    const plain = postgresStore({ driver: fromPg(pool), schema: plainSchema });
    await plain.setup();
    await plain.transaction((tx) =>
      plain.publish(tx, [
        {
          type: Order.type,
          payload: INLINE_PAYLOAD,
          headers: { 'x-origin': '<b>checkout</b>' },
          handlers: [{ name: 'plain', maxAttempts: 1 }],
        },
      ]),
    );
    const { rows } = await pool.query(`SELECT id FROM "${plainSchema}".relaybus_events`);
    assert.deepEqual(rows, [], 'published inline: no events row');
    const [doomed] = await owners.claim(plain, {
      owner: 'plain-test',
      handlers: ['plain'],
      limit: 1,
      leaseDurationMs: 30_000,
    });
    assert.ok(await plain.bury({ deliveryId: doomed!.id, leaseToken: doomed!.leaseToken }, { error: 'plain failure' }));
    await owners.relinquish(plain, 'plain-test');
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${plainSchema}" CASCADE`);
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  describe('in headless Chromium', { skip: browserSkip }, () => {
    let context: BrowserContext;
    let browser: Awaited<ReturnType<typeof launchChromium>> | undefined;

    before(async () => {
      browser = await launchChromium({ width: 1280, height: 1400 });
      context = browser.context;
    });
    after(async () => {
      await browser?.close();
    });

    async function load(page: Page, address: string): Promise<void> {
      await page.goto(address);
      await page.waitForSelector('body[data-loaded]');
    }

    it('shows the numbers of relaybus stats --json, shows <script> as text, finds an event, and requeues a dead letter that then runs', {
      timeout: 60_000,
    }, async () => {
      const { cli, url: address } = await startDashboard([...dbFlags, '--sample-interval', '200ms']);
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (error) => problems.push(error.message));
      page.on('console', (message) => {
        if (message.type() === 'error') problems.push(message.text());
      });
      try {
        await load(page, address);
        const stats = await runCli(['stats', '--json', ...dbFlags]);
        assert.equal(stats.code, 0, stats.stderr);
        const expected = JSON.parse(stats.stdout) as {
          handlers: Record<string, Record<string, number | null>>;
          dead: number;
        };
        const shown = await page.$$eval('#handlers tbody tr[data-handler]', (rows) =>
          rows.map((row) => ({
            handler: row.getAttribute('data-handler'),
            cells: Object.fromEntries(
              [...row.querySelectorAll('td[data-field]')].map((td) => [td.getAttribute('data-field'), td.textContent]),
            ),
          })),
        );
        assert.deepEqual(shown.map((row) => row.handler).sort(), Object.keys(expected.handlers).sort());
        for (const row of shown) {
          for (const field of ['pending', 'due', 'scheduled', 'inFlight', 'dead', 'completed']) {
            assert.equal(row.cells[field], String(expected.handlers[row.handler!]![field]), `${row.handler} ${field}`);
          }
        }
        assert.equal(await page.textContent('#dead-count'), `(${expected.dead})`);
        assert.equal(await page.$$eval('#chart polyline', (lines) => lines.length), 2, 'a backlog line per handler');

        const errorText = await page.$eval(`#dead tbody tr td[data-field="lastError"]`, (td) => td.textContent);
        assert.ok(errorText?.includes(XSS.replaceAll('"', '\\"')), `the error is shown as text: ${errorText}`);
        // The dead letter's payload, opened: its JSON as text, `<script>` and all.
        const deadRow = page.locator('#dead tbody tr').first();
        await deadRow.locator('td.payload summary').click();
        const payloadShown = deadRow.locator('td.payload pre[data-field="payload"]');
        await payloadShown.waitFor({ state: 'visible' });
        assert.equal(await payloadShown.textContent(), JSON.stringify({ note: XSS }, null, 2));
        await page.waitForSelector(`body:not([data-loaded="${await page.getAttribute('body', 'data-loaded')}"])`);
        assert.ok(await payloadShown.isVisible(), 'an opened payload stays open across refreshes');
        assert.equal(
          await page.evaluate(() => (globalThis as { __pwned?: unknown }).__pwned),
          undefined,
          'no injected script ran',
        );
        assert.equal(await page.$$eval('main img', (images) => images.length), 0, 'no injected element exists');

        await page.fill('#event-id', eventId);
        await page.click('#search button');
        await page.waitForSelector('#event tbody tr');
        const rows = await page.$$eval('#event tbody tr', (trs) =>
          trs.map((tr) => ({
            status: tr.querySelector('[data-field="status"]')?.textContent,
            text: tr.textContent,
          })),
        );
        assert.deepEqual(
          rows.map((row) => row.status).sort(),
          ['completed', 'dead'],
          "the event's deliveries, the completed one from the history",
        );
        assert.equal(
          await page.textContent('#event-payload [data-field="payload"]'),
          JSON.stringify({ note: XSS }, null, 2),
          "the event's payload, as text",
        );
        assert.ok(await page.isVisible('#event-payload'));
        assert.ok(
          rows.every((row) => row.text?.includes('<i>key</i>')),
          'the key is shown as text',
        );
        assert.equal(
          await page.$$eval('main i, main b', (nodes) => nodes.filter((node) => node.closest('#event')).length),
          0,
        );

        const [target] = await deadIds();
        await page.click(`button[data-requeue="${target}"]`);
        await page.locator('#requeue-result', { hasText: 'requeued 1 delivery' }).waitFor();
        assert.deepEqual((await deadIds()).includes(target!), false, 'requeued in the database');
        riskyWorks = true;
        const bus = makeBus();
        await bus.start();
        try {
          await waitFor(() => ran.includes(target!), 'the requeued delivery runs', 10_000);
          // Nothing pending and nothing in flight: a delivery still claimed when the bus stops is released, pending again.
          await waitFor(
            async () => {
              const stats = await store.statistics();
              return stats.pending === 0 && stats.inFlight === 0;
            },
            'the backlog drained',
            10_000,
          );
        } finally {
          await bus.stop();
        }
        await page.locator('#handlers tr[data-total] td[data-field="pending"]', { hasText: /^0$/ }).waitFor();
        // One handler paused, for the picture: its row says since when and why, with a Resume button.
        await store.pauseHandler({ handler: 'risky', reason: 'payment provider outage' });
        try {
          await page.waitForSelector('#handlers tr[data-handler="risky"][data-paused] button[data-resume]');
          if (process.env.RELAYBUS_SCREENSHOTS)
            await page.screenshot({ path: join(REPO, 'docs/public/dashboard.png'), fullPage: true });
        } finally {
          await store.resumeHandler({ handler: 'risky' });
        }
        assert.deepEqual(problems, [], 'no script error on the page');
      } finally {
        await page.close();
        await stop(cli);
      }
    });

    it('pauses and resumes a handler from its row; a pause reason holding <script> is shown as text', {
      timeout: 30_000,
    }, async () => {
      // A handler of its own with one delivery no worker runs, so the other tests' numbers do not move.
      await store.transaction((tx) =>
        store.publish(tx, [
          { type: Order.type, payload: { note: 'pause' }, handlers: [{ name: 'pause-probe', maxAttempts: 3 }] },
        ]),
      );
      const isPaused = async () => (await store.listPausedHandlers()).some((entry) => entry.handler === 'pause-probe');
      const { cli, url: address } = await startDashboard([...dbFlags, '--sample-interval', '200ms']);
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (error) => problems.push(error.message));
      const row = '#handlers tbody tr[data-handler="pause-probe"]';
      try {
        await load(page, address);
        assert.equal(await page.textContent(`${row} td[data-field="paused"]`), '');
        assert.equal(await page.$$eval('#handlers tr[data-total] button', (buttons) => buttons.length), 0);
        await page.click(`${row} button[data-pause="pause-probe"]`);
        await page.waitForSelector(`${row}[data-paused] button[data-resume="pause-probe"]`);
        assert.equal(await isPaused(), true, 'paused in the database');
        assert.match((await page.textContent(`${row} td[data-field="paused"]`)) ?? '', /^paused \S+ ago \(.+\)$/);
        assert.equal(await page.textContent('#handler-result'), 'paused pause-probe');

        await page.click(`${row} button[data-resume="pause-probe"]`);
        await page.waitForSelector(`${row}:not([data-paused]) button[data-pause="pause-probe"]`);
        assert.equal(await isPaused(), false, 'resumed in the database');
        assert.equal(await page.textContent(`${row} td[data-field="paused"]`), '');
        assert.equal(await page.textContent('#handler-result'), 'resumed pause-probe');

        // A reason given elsewhere (relaybus handlers pause --reason, the API): text, never HTML.
        assert.ok(await store.pauseHandler({ handler: 'pause-probe', reason: XSS }));
        await page.waitForSelector(`${row}[data-paused]`);
        const shown = (await page.textContent(`${row} td[data-field="paused"]`)) ?? '';
        assert.ok(shown.endsWith(`: ${XSS}`), shown);
        assert.equal(await page.evaluate(() => (globalThis as { __pwned?: unknown }).__pwned), undefined);
        assert.equal(await page.$$eval('main img, main script', (nodes) => nodes.length), 0, 'no injected element');
        assert.deepEqual(problems, [], 'no script error on the page');
      } finally {
        await page.close();
        await stop(cli);
        await store.resumeHandler({ handler: 'pause-probe' });
        const [held] = await owners.claim(store, {
          owner: 'pause-probe',
          handlers: ['pause-probe'],
          limit: 1,
          leaseDurationMs: 30_000,
        });
        if (held) await store.completeMany([{ deliveryId: held.id, leaseToken: held.leaseToken }]);
        await owners.relinquish(store, 'pause-probe');
      }
    });

    it('with a token: the page asks for it, and works once logged in', { timeout: 30_000 }, async () => {
      const { cli, url: address } = await startDashboard([...dbFlags, '--host', '0.0.0.0'], {
        RELAYBUS_DASHBOARD_TOKEN: TOKEN,
      });
      const page = await context.newPage();
      try {
        await page.goto(address);
        assert.equal(
          await page.$$eval('form[action="/login"] input[name="token"]', (inputs) => inputs.length),
          1,
          'the login form',
        );
        if (process.env.RELAYBUS_SCREENSHOTS)
          await page.screenshot({ path: join(REPO, 'docs/public/dashboard-login.png') });
        await page.fill('#token', 'not-the-token-at-all');
        await page.click('button[type="submit"]');
        await page.waitForSelector('.error');
        await page.fill('#token', TOKEN);
        await page.click('button[type="submit"]');
        await page.waitForSelector('body[data-loaded]', { timeout: 5_000 }).catch(async (error: unknown) => {
          throw new Error(`${String(error)}\n${page.url()}\n${await page.content()}`);
        });
        assert.ok(await page.$('#handlers tbody tr[data-handler="email"]'));
        // Logging out from the page itself (same origin, the session's CSRF field) ends the session.
        await page.click('form[action="/logout"] button');
        await page.waitForSelector('form[action="/login"]');
        assert.equal((await context.cookies(address)).filter((c) => c.name === 'relaybus_dashboard').length, 0);
      } finally {
        await page.close();
        await stop(cli);
      }
    });

    it('without completion history: the completed column says n/a and why; an inline dead letter shows its payload as text', {
      timeout: 30_000,
    }, async () => {
      const { cli, url: address } = await startDashboard(plainFlags);
      const page = await context.newPage();
      try {
        await load(page, address);
        assert.equal(await page.textContent('#handlers tr[data-handler="plain"] td[data-field="completed"]'), 'n/a');
        assert.ok(await page.isVisible('#completed-note'));
        assert.match(
          (await page.textContent('#completed-note')) ?? '',
          /^completed: n\/a, no completion history is recorded\. A completed delivery is deleted; workers record one in the history only with completionHistory: true\.$/,
        );
        assert.equal(
          await page.textContent('#dead td.payload pre[data-field="payload"]'),
          JSON.stringify(INLINE_PAYLOAD, null, 2),
        );
        assert.equal(await page.textContent('#dead td.payload pre[data-field="headers"]'), 'x-origin: <b>checkout</b>');
        assert.equal(
          await page.$$eval('main b, main img, main script', (nodes) => nodes.length),
          0,
          'no injected element',
        );
        assert.equal(await page.evaluate(() => (globalThis as { __pwned?: unknown }).__pwned), undefined);
        assert.match(
          (await page.textContent('section:has(#lanes) p.muted')) ?? '',
          /^The lanes a worker holds: its lease owner id/,
          'the lanes section says what its columns show',
        );
      } finally {
        await page.close();
        await stop(cli);
      }
    });
  });

  describe('over HTTP', () => {
    it('refuses a non-local bind without a token, and a short token (exit 2)', { timeout: 30_000 }, async () => {
      const open = await runCli(['dashboard', '--host', '0.0.0.0', ...dbFlags], {
        env: { RELAYBUS_DASHBOARD_TOKEN: undefined },
      });
      assert.equal(open.code, 2);
      assert.match(open.stderr, /--host 0\.0\.0\.0 lets other machines reach the dashboard, so it needs a token/);
      const short = await runCli(['dashboard', '--token', 'abc', ...dbFlags]);
      assert.equal(short.code, 2);
      assert.match(short.stderr, /--token is not a usable token: it has 3 characters; use at least 16/);
    });

    it('with a token, POSTs without it, without the CSRF token or from another origin are refused and change nothing', {
      timeout: 30_000,
    }, async () => {
      const { cli, url: address } = await startDashboard([...dbFlags, '--host', '0.0.0.0', '--token', TOKEN]);
      try {
        const before = await deadIds();
        assert.ok(before.length > 0);
        const post = (headers: Record<string, string>) =>
          fetch(`${address}/api/requeue`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...headers },
            body: JSON.stringify({ deliveryIds: before }),
            redirect: 'manual',
          });
        assert.equal((await post({})).status, 401, 'no token');
        assert.equal((await post({ authorization: 'Bearer wrong-token-wrong-token' })).status, 401, 'a wrong token');
        assert.equal((await fetch(`${address}/api/overview`)).status, 401, 'reads need the token too');

        const { login, cookie, csrf } = await logIn(address);
        assert.equal(login.status, 303);
        assert.match(login.headers.get('set-cookie')!, /HttpOnly; SameSite=Strict/);
        assert.equal((await post({ cookie })).status, 403, 'a session without the CSRF token');
        assert.equal((await post({ cookie, 'x-relaybus-csrf': 'forged' })).status, 403, 'a wrong CSRF token');
        assert.equal(
          (await post({ cookie, 'x-relaybus-csrf': csrf, origin: 'http://evil.example' })).status,
          403,
          'another origin',
        );
        const form = await fetch(`${address}/api/requeue`, {
          method: 'POST',
          headers: { cookie, 'x-relaybus-csrf': csrf, 'content-type': 'application/x-www-form-urlencoded' },
          body: 'deliveryIds=1',
        });
        assert.equal(form.status, 415, 'a form post');
        assert.deepEqual(await deadIds(), before, 'nothing was requeued');

        assert.equal(
          (await post({ authorization: `Bearer ${TOKEN}`, origin: 'http://127.0.0.1:1' })).status,
          403,
          'a bearer request from another origin',
        );
        // A bearer request needs no CSRF token: a browser never attaches an Authorization header by itself.
        const response = await fetch(`${address}/api/requeue`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
          body: JSON.stringify({ deliveryIds: [before[0]] }),
        });
        assert.deepEqual(await response.json(), { requeued: 1 }, 'the right token works (scripts)');
        const headers = (await fetch(address, { headers: { cookie } })).headers;
        assert.match(headers.get('content-security-policy')!, /script-src 'self'/);
        assert.equal(headers.get('x-frame-options'), 'DENY');
      } finally {
        await stop(cli);
      }
    });

    it('pauses and resumes through the API: other origins and POSTs without the CSRF token change nothing; a bearer works', {
      timeout: 30_000,
    }, async () => {
      const { cli, url: address } = await startDashboard([...dbFlags, '--host', '0.0.0.0', '--token', TOKEN]);
      const pausedNames = async () => (await store.listPausedHandlers()).map((entry) => entry.handler);
      try {
        const { cookie, csrf } = await logIn(address);
        const post = async (path: string, body: unknown, headers: Record<string, string>) => {
          const response = await fetch(`${address}${path}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...headers },
            body: typeof body === 'string' ? body : JSON.stringify(body),
          });
          return { status: response.status, body: (await response.json()) as Record<string, unknown> };
        };
        const session = { cookie, 'x-relaybus-csrf': csrf };
        const pause = { handler: 'api-pause', reason: 'provider outage' };

        assert.equal((await post('/api/pause', pause, {})).status, 401, 'no token');
        assert.equal((await post('/api/pause', pause, { cookie })).status, 403, 'no CSRF token');
        assert.equal(
          (await post('/api/pause', pause, { cookie, 'x-relaybus-csrf': 'forged' })).status,
          403,
          'a wrong CSRF token',
        );
        assert.equal(
          (await post('/api/pause', pause, { ...session, origin: 'http://evil.example' })).status,
          403,
          'another origin',
        );
        assert.equal(
          (await post('/api/pause', pause, { authorization: `Bearer ${TOKEN}`, origin: 'http://127.0.0.1:1' })).status,
          403,
          'a bearer request from another origin',
        );
        assert.deepEqual(await pausedNames(), [], 'nothing was paused');

        for (const [path, body] of [
          ['/api/pause', { handler: 3 }],
          ['/api/pause', { handler: '' }],
          ['/api/pause', { handler: 'api-pause', reason: 7 }],
          ['/api/pause', { handler: 'api-pause', extra: true }],
          ['/api/pause', ['api-pause']],
          ['/api/resume', { handler: 'api-pause', reason: 'why' }],
          ['/api/resume', {}],
        ] as const) {
          const bad = await post(path, body, session);
          assert.equal(bad.status, 400, `${path} ${JSON.stringify(body)}`);
          assert.match(String(bad.body.error), /^the body must be \{"handler": "<name>"/);
        }
        const notJson = await post('/api/pause', '{handler', session);
        assert.deepEqual([notJson.status, notJson.body], [400, { error: 'the body is not JSON' }]);
        assert.deepEqual(await pausedNames(), [], 'nothing was paused');

        assert.deepEqual(await post('/api/pause', pause, session), {
          status: 200,
          body: { handler: 'api-pause', paused: true, alreadyPaused: false },
        });
        const [stored] = await store.listPausedHandlers();
        assert.deepEqual([stored?.handler, stored?.reason], ['api-pause', 'provider outage'], 'paused in the database');
        assert.deepEqual(
          (await post('/api/pause', { handler: 'api-pause', reason: 'another' }, session)).body,
          { handler: 'api-pause', paused: true, alreadyPaused: true },
          'a second pause changes nothing',
        );
        const overview = (await (await fetch(`${address}/api/overview`, { headers: { cookie } })).json()) as {
          stats: { paused: string[] };
          paused: { handler: string; pausedAt: string; reason: string | null }[];
        };
        assert.deepEqual(overview.stats.paused, ['api-pause'], 'as relaybus stats --json says it');
        assert.deepEqual(overview.paused, [
          { handler: 'api-pause', pausedAt: stored!.pausedAt.toISOString(), reason: 'provider outage' },
        ]);

        assert.equal((await post('/api/resume', { handler: 'api-pause' }, { cookie })).status, 403, 'no CSRF token');
        assert.equal(
          (await post('/api/resume', { handler: 'api-pause' }, { ...session, origin: 'http://evil.example' })).status,
          403,
          'another origin',
        );
        assert.deepEqual(await pausedNames(), ['api-pause'], 'still paused');

        // A bearer request needs no CSRF token (scripts).
        const bearer = { authorization: `Bearer ${TOKEN}` };
        assert.deepEqual(await post('/api/resume', { handler: 'api-pause' }, bearer), {
          status: 200,
          body: { handler: 'api-pause', resumed: true },
        });
        assert.deepEqual(await pausedNames(), [], 'resumed in the database');
        assert.deepEqual(await post('/api/resume', { handler: 'api-pause' }, session), {
          status: 409,
          body: { error: 'api-pause is not paused; nothing changed' },
        });
        assert.equal((await post('/api/pause', { handler: 'api-pause' }, bearer)).status, 200, 'a bearer pause');
        assert.equal((await store.listPausedHandlers())[0]?.reason, null, 'no reason given');
      } finally {
        await stop(cli);
        await store.resumeHandler({ handler: 'api-pause' });
      }
    });

    it('a logout from another origin (another port of 127.0.0.1) or without the CSRF token is refused; the session survives', {
      timeout: 30_000,
    }, async () => {
      const { cli, url: address } = await startDashboard([...dbFlags, '--host', '0.0.0.0', '--token', TOKEN]);
      try {
        const { cookie, html, csrf } = await logIn(address);
        assert.match(
          html,
          new RegExp(`<form method="post" action="/logout"><input type="hidden" name="csrf" value="${csrf}">`),
        );
        const otherPort = `http://127.0.0.1:${Number(new URL(address).port) + 1}`;
        const logout = (headers: Record<string, string>, form: Record<string, string>) =>
          fetch(`${address}/logout`, {
            method: 'POST',
            headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', ...headers },
            body: new URLSearchParams(form),
            redirect: 'manual',
          });
        const alive = async () => (await fetch(`${address}/api/overview`, { headers: { cookie } })).status;

        const crossPort = await logout({ origin: otherPort }, { csrf });
        assert.equal(crossPort.status, 403, 'a form on another port of the same host');
        assert.match(
          ((await crossPort.json()) as { error: string }).error,
          /cross-origin logout from http:\/\/127\.0\.0\.1:\d+ refused/,
        );
        assert.equal(crossPort.headers.get('set-cookie'), null);
        assert.equal((await logout({ origin: 'http://evil.example' }, { csrf })).status, 403, 'another site');
        assert.equal((await logout({}, {})).status, 403, 'no CSRF token');
        assert.equal((await logout({ origin: address }, { csrf: 'forged' })).status, 403, 'a wrong CSRF token');
        assert.equal(await alive(), 200, 'the session survives');

        const own = await logout({ origin: address }, { csrf });
        assert.equal(own.status, 303, "the page's own logout");
        assert.match(own.headers.get('set-cookie')!, /^relaybus_dashboard=; .*Max-Age=0/);
        assert.equal(await alive(), 401, 'the session is over');
      } finally {
        await stop(cli);
      }
    });

    it('dead letters and a found event carry their payload as text and their headers, an inline event too', {
      timeout: 30_000,
    }, async () => {
      // A dead letter of a handler of its own (the other tests requeue theirs), its event in an events row.
      const probeId = `probe-${XSS}`.slice(0, 200);
      await store.transaction((tx) =>
        store.publish(tx, [
          {
            id: probeId,
            type: 'probe.event', // no subscription: no delivery but the probe's
            payload: { note: XSS },
            headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
            handlers: [{ name: 'payload-probe', maxAttempts: 1 }],
          },
        ]),
      );
      const [doomed] = await owners.claim(store, {
        owner: 'probe',
        handlers: ['payload-probe'],
        limit: 1,
        leaseDurationMs: 30_000,
      });
      assert.ok(await store.bury({ deliveryId: doomed!.id, leaseToken: doomed!.leaseToken }, { error: 'probe' }));
      await owners.relinquish(store, 'probe');
      const { cli, url: address } = await startDashboard(dbFlags);
      const plainDashboard = await startDashboard(plainFlags);
      try {
        type Delivery = { eventId: string; payload: string | null; headers: Record<string, string> | null };
        const dead = (await (await fetch(`${address}/api/dead?handler=payload-probe`)).json()) as { items: Delivery[] };
        assert.deepEqual(
          dead.items.map((item) => [item.eventId, item.payload, item.headers]),
          [
            [
              probeId,
              JSON.stringify({ note: XSS }, null, 2),
              { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
            ],
          ],
        );
        const found = (await (await fetch(`${address}/api/event?id=${encodeURIComponent(probeId)}`)).json()) as {
          payload: string | null;
          headers: Record<string, string> | null;
          items: object[];
        };
        assert.equal(found.payload, JSON.stringify({ note: XSS }, null, 2));
        assert.deepEqual(found.headers, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
        assert.equal(found.items.length, 1);

        const plain = (await (await fetch(`${plainDashboard.url}/api/dead`)).json()) as { items: Delivery[] };
        assert.deepEqual(
          plain.items.map((item) => [item.payload, item.headers]),
          [[JSON.stringify(INLINE_PAYLOAD, null, 2), { 'x-origin': '<b>checkout</b>' }]],
          'an inline event: from its delivery row',
        );
        const overview = (await (await fetch(`${plainDashboard.url}/api/overview`)).json()) as {
          stats: { completed: number | null; handlers: Record<string, { completed: number | null }> };
        };
        assert.equal(overview.stats.completed, null, 'no completion history: null, not 0');
        assert.equal(overview.stats.handlers.plain?.completed, null);
      } finally {
        await stop(plainDashboard.cli);
        await stop(cli);
        await store.requeue({ handler: 'payload-probe' }); // leaves the other tests' dead letters as they were
      }
    });

    it('on a loopback bind: no CSRF token or a foreign Host is refused; a port in use is one clear error', {
      timeout: 30_000,
    }, async () => {
      const { cli, url: address } = await startDashboard(dbFlags);
      try {
        const before = await deadIds();
        const noCsrf = await fetch(`${address}/api/requeue`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ handler: 'risky' }),
        });
        assert.equal(noCsrf.status, 403);
        const { request } = await import('node:http');
        const status = await new Promise<number>((resolve, reject) => {
          request(`${address}/`, { headers: { host: 'rebound.evil.example' } }, (response) => {
            response.resume();
            resolve(response.statusCode!);
          })
            .on('error', reject)
            .end();
        });
        assert.equal(status, 421, 'a DNS-rebinding Host is refused');
        assert.deepEqual(await deadIds(), before);
      } finally {
        await stop(cli);
      }
      const busy = createServer();
      await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
      try {
        const { port } = busy.address() as AddressInfo;
        const result = await runCli(['dashboard', '--port', String(port), ...dbFlags]);
        assert.equal(result.code, 1);
        assert.match(
          result.stderr,
          new RegExp(
            `^relaybus: port ${port} on 127\\.0\\.0\\.1 is in use \\(a worker's --metrics-port, another dashboard\\?\\); pick another --port\\n$`,
          ),
        );
      } finally {
        busy.close();
      }
    });

    it('lists the held lanes with their holder, lease and in-flight count (store.listLanes)', {
      timeout: 30_000,
    }, async () => {
      // A delivery of a handler of its own, so the other tests' numbers do not move.
      await store.transaction((tx) =>
        store.publish(tx, [
          { type: Order.type, payload: { note: 'lane' }, handlers: [{ name: 'lane-probe', maxAttempts: 3 }] },
        ]),
      );
      const [held] = await owners.claim(store, {
        owner: 'dash-holder',
        handlers: ['lane-probe'],
        limit: 1,
        leaseDurationMs: 60_000,
      });
      assert.ok(held, 'a lane-probe delivery to hold');
      const { cli, url: address } = await startDashboard(dbFlags);
      try {
        const overview = (await (await fetch(`${address}/api/overview`)).json()) as {
          lanes: { lane: number; owner: string; inFlight: number; leaseExpiresAt: string; handlers: string[] }[];
        };
        const lane = overview.lanes.find((l) => l.owner === 'dash-holder');
        assert.ok(lane, JSON.stringify(overview.lanes));
        assert.equal(lane.lane, held.lane);
        assert.equal(lane.inFlight, 1);
        assert.deepEqual(lane.handlers, ['lane-probe']);
        assert.ok(Date.parse(lane.leaseExpiresAt) > Date.now(), 'a live lease');
      } finally {
        await stop(cli);
        await store.completeMany([{ deliveryId: held.id, leaseToken: held.leaseToken }]);
        await owners.relinquish(store, 'dash-holder');
      }
    });
  });
});
