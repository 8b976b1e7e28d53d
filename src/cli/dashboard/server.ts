import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InvalidInputError, RelayBusError } from '../../core/errors.js';
import { describeError } from '../../core/logger.js';
import type { Statistics, Store } from '../../store/contract.js';
import { pausedHandlers, statisticsJson } from '../commands/stats.js';
import { APP_CSS, APP_JS, loginPage, mainPage } from './page.js';
import { deliveryJson, payloadText } from './payload.js';
import { overviewReplays, replayIdParam } from './replays.js';
import { Gate, securityHeaders, type Access } from './security.js';

/**
 * The admin page's HTTP server (node:http, no framework, no build step): a static page and script,
 * and a small JSON API over the store API only (`statistics`, `listDeliveries`, `requeue`, `pauseHandler`,
 * `resumeHandler`, `listPausedHandlers`, `listReplays`, `cancelReplay`).
 *
 *   GET  /                 the page (or the login form when a token is required)
 *   GET  /app.js, /app.css its script and styles
 *   GET  /api/overview     statistics (the shape of `relaybus stats --json`, paused handlers marked), the paused handlers
 *                          (since when, why), the running replays, the backlog history, the held lanes (holder, lease, in flight)
 *   GET  /api/dead         dead letters with their last error, payload (as text, cut) and headers (?handler=, ?cursor=)
 *   GET  /api/event?id=    an event's payload and headers, its deliveries, and their completion history where one is kept
 *   POST /api/requeue      { deliveryIds } or { handler }: dead deliveries back to pending
 *   POST /api/pause        { handler, reason? }: no worker claims the handler's deliveries until it is resumed
 *   POST /api/resume       { handler }: a paused handler's deliveries are claimed again (409 when it is not paused)
 *   POST /api/replay/cancel { replayId }: stop a running replay (409 when it is not running, 404 when unknown)
 *   POST /login, /logout   the session of a token-protected dashboard (logout: same origin, the session's `csrf` field)
 *
 * See `security.ts` for the rules. Everything the API returns is data the page writes as text.
 */

/** Backlog samples kept for the chart (at the default 2 s: 24 minutes). */
export const HISTORY_LENGTH = 720;
const MAX_BODY_BYTES = 64 * 1024;
const DEAD_PAGE = 50;
const LANE_SCAN_PAGES = 5;

export interface DashboardOptions {
  readonly store: Store<unknown>;
  readonly schema: string;
  /** Where the store points, for the header (`host:port/db`). */
  readonly target: string;
  readonly host: string;
  readonly port: number;
  readonly token: string | undefined;
  readonly loopback: boolean;
  /** How often the backlog is sampled for the chart. */
  readonly sampleIntervalMs: number;
}

export interface Dashboard {
  readonly url: string;
  close(): Promise<void>;
}

interface Sample {
  readonly at: string;
  readonly backlog: Readonly<Record<string, number>>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

function sendText(
  response: ServerResponse,
  status: number,
  type: string,
  text: string,
  headers: Record<string, string> = {},
): void {
  response.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text), ...headers });
  response.end(text);
}

async function readBody(request: IncomingMessage): Promise<string> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `the body exceeds ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The requeue selector of a POST body: `{ deliveryIds: string[] }` or `{ handler: string }`. */
function requeueParams(body: unknown): { deliveryIds: string[] } | { handler: string } {
  if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
    const { deliveryIds, handler } = body as { deliveryIds?: unknown; handler?: unknown };
    const keys = Object.keys(body);
    if (
      keys.length === 1 &&
      Array.isArray(deliveryIds) &&
      deliveryIds.length > 0 &&
      deliveryIds.length <= 1_000 &&
      deliveryIds.every((id) => typeof id === 'string' && id.length > 0 && id.length <= 200)
    ) {
      return { deliveryIds: deliveryIds as string[] };
    }
    if (keys.length === 1 && typeof handler === 'string' && handler.length > 0 && handler.length <= 200)
      return { handler };
  }
  throw new HttpError(400, 'the body must be {"deliveryIds": ["<id>", ...]} (1 to 1000 ids) or {"handler": "<name>"}');
}

/** The handler (and the reason) of a pause or resume POST body: `{ handler, reason? }`, `reason` only when `withReason`. */
function handlerParams(body: unknown, withReason: boolean): { handler: string; reason?: string } {
  const shape = withReason
    ? '{"handler": "<name>", "reason": "<why>"} (the reason is optional)'
    : '{"handler": "<name>"}';
  if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
    const { handler, reason } = body as { handler?: unknown; reason?: unknown };
    const allowed = withReason ? ['handler', 'reason'] : ['handler'];
    if (
      Object.keys(body).every((key) => allowed.includes(key)) &&
      typeof handler === 'string' &&
      handler.length > 0 &&
      handler.length <= 200 &&
      (reason === undefined || (typeof reason === 'string' && reason.length <= 1_000))
    )
      return reason === undefined || reason === '' ? { handler } : { handler, reason };
  }
  throw new HttpError(
    400,
    `the body must be ${shape}: a handler name of 1 to 200 characters, a reason of at most 1000`,
  );
}

/** Start the dashboard server; rejects with the listen error (EADDRINUSE, ...). */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const { store } = options;
  const gate = new Gate({ token: options.token, loopback: options.loopback });
  const history: Sample[] = [];
  let lastError: string | undefined;

  const record = (stats: Statistics, at: Date): void => {
    const last = history.at(-1);
    if (last !== undefined && at.getTime() - Date.parse(last.at) < 500) return; // several pages polling at once
    const backlog: Record<string, number> = {};
    for (const [handler, counts] of Object.entries(stats.handlers)) backlog[handler] = counts.pending + counts.inFlight;
    history.push({ at: at.toISOString(), backlog });
    if (history.length > HISTORY_LENGTH) history.splice(0, history.length - HISTORY_LENGTH);
  };
  const sample = async (): Promise<void> => {
    try {
      const at = new Date();
      record(await store.statistics(), at);
      lastError = undefined;
    } catch (error) {
      lastError = describeError(error);
    }
  };
  await sample();
  const sampler = setInterval(() => void sample(), options.sampleIntervalMs);
  sampler.unref();

  /**
   * The held lanes (store.listLanes: owner, epoch, lease expiry, in flight), with the handlers and the oldest event of
   * what each runs, from the deliveries the store lists as processing.
   */
  async function lanes(): Promise<{ lanes: unknown[]; truncated: boolean }> {
    const held = await store.listLanes();
    const byLane = new Map<number, { inFlight: number; handlers: Set<string>; oldestCreatedAt: Date }>();
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page = await store.listDeliveries({
        status: 'processing',
        limit: 1_000,
        ...(cursor === null ? {} : { cursor }),
      });
      for (const item of page.items) {
        const lane = byLane.get(item.lane) ?? {
          inFlight: 0,
          handlers: new Set<string>(),
          oldestCreatedAt: item.createdAt,
        };
        lane.inFlight += 1;
        lane.handlers.add(item.handler);
        if (item.createdAt < lane.oldestCreatedAt) lane.oldestCreatedAt = item.createdAt;
        byLane.set(item.lane, lane);
      }
      cursor = page.nextCursor;
      pages += 1;
    } while (cursor !== null && pages < LANE_SCAN_PAGES);
    const list = held.map((lane) => {
      const running = byLane.get(lane.lane);
      return {
        lane: lane.lane,
        owner: lane.owner,
        epoch: lane.epoch,
        leaseExpiresAt: lane.leaseExpiresAt.toISOString(),
        inFlight: lane.inFlight,
        handlers: running === undefined ? [] : [...running.handlers].sort(),
        oldestCreatedAt: running?.oldestCreatedAt.toISOString() ?? null,
      };
    });
    return { lanes: list, truncated: cursor !== null };
  }

  /**
   * The POST routes: each takes the parsed JSON body, once `api` has checked the request (`Gate.refusePost`) and read
   * it, and returns what to answer.
   */
  const actions: Readonly<Record<string, (body: unknown) => Promise<object>>> = {
    '/api/requeue': async (body) => ({ requeued: await store.requeue(requeueParams(body)) }),
    '/api/pause': async (body) => {
      const params = handlerParams(body, true);
      const now = await store.pauseHandler(params);
      // Already paused: nothing changed, its first pause and reason are kept.
      return { handler: params.handler, paused: true, alreadyPaused: !now };
    },
    '/api/resume': async (body) => {
      const { handler } = handlerParams(body, false);
      if (!(await store.resumeHandler({ handler })))
        throw new HttpError(409, `${handler} is not paused; nothing changed`);
      return { handler, resumed: true };
    },
    '/api/replay/cancel': async (body) => {
      const replayId = replayIdParam(body);
      const replay = await store.getReplay(replayId);
      if (replay === null) throw new HttpError(404, `no replay ${replayId}`);
      if (replay.state !== 'running')
        throw new HttpError(409, `replay ${replayId} is ${replay.state}; nothing changed`);
      const after = await store.cancelReplay(replayId);
      return { replayId, state: after?.state ?? replay.state };
    },
  };

  async function api(
    path: string,
    query: URLSearchParams,
    request: IncomingMessage,
    access: Access,
    response: ServerResponse,
  ): Promise<void> {
    if (request.method === 'POST') {
      const action = actions[path];
      if (action === undefined) throw new HttpError(404, `no route POST ${path}`);
      const refused = gate.refusePost(request, access);
      if (refused !== undefined) throw new HttpError(refused.status, refused.reason);
      let body: unknown;
      try {
        body = JSON.parse(await readBody(request));
      } catch (error) {
        if (error instanceof HttpError) throw error;
        throw new HttpError(400, 'the body is not JSON');
      }
      const result = await action(body);
      void sample();
      sendJson(response, 200, result);
      return;
    }
    if (request.method !== 'GET') throw new HttpError(405, 'GET or POST only');
    if (path === '/api/overview') {
      const at = new Date();
      const stats = await store.statistics();
      record(stats, at);
      const paused = await pausedHandlers(store);
      const lanesView = await lanes();
      sendJson(response, 200, {
        schema: options.schema,
        target: options.target,
        // As `relaybus stats --json` prints them: `"paused": true` on a paused handler, their names in `paused`.
        stats: {
          ...statisticsJson(stats, options.schema, at, new Set(paused?.map((entry) => entry.handler))),
          ...(paused === undefined ? {} : { paused: paused.map((entry) => entry.handler) }),
        },
        // Since when and why (null: no reason given); empty for a schema older than pausing (migration 0004).
        paused: (paused ?? []).map((entry) => ({
          handler: entry.handler,
          pausedAt: entry.pausedAt.toISOString(),
          reason: entry.reason,
        })),
        replays: await overviewReplays(store, at),
        history,
        ...lanesView,
      });
    } else if (path === '/api/dead') {
      const handler = query.get('handler') ?? undefined;
      const cursor = query.get('cursor') ?? undefined;
      const page = await store.listDeliveries({
        status: 'dead',
        limit: DEAD_PAGE,
        ...(handler ? { handler } : {}),
        ...(cursor ? { cursor } : {}),
        withPayload: true,
      });
      sendJson(response, 200, { items: page.items.map(deliveryJson), nextCursor: page.nextCursor });
    } else if (path === '/api/event') {
      const eventId = query.get('id') ?? '';
      if (eventId === '' || eventId.length > 200)
        throw new HttpError(400, 'give an event id: /api/event?id=<event id>');
      const page = await store.listDeliveries({ eventId, limit: 1_000, withPayload: true });
      // Every delivery of one event carries the same payload (an inline event's copies included): send it once.
      const stored = page.items.find((item) => item.headers !== undefined);
      sendJson(response, 200, {
        eventId,
        payload: stored === undefined ? null : payloadText(stored.payload),
        headers: stored?.headers ?? null,
        items: page.items.map((item) => {
          const { payload: _payload, headers: _headers, ...rest } = deliveryJson(item);
          return rest;
        }),
      });
    } else {
      throw new HttpError(404, `no route GET ${path}`);
    }
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    securityHeaders(response);
    if (!gate.hostAllowed(request))
      throw new HttpError(421, 'this dashboard answers to localhost, 127.0.0.1 and [::1] only');
    const url = new URL(request.url ?? '/', 'http://dashboard.invalid');
    const path = url.pathname;
    if (path === '/app.js') return sendText(response, 200, 'text/javascript; charset=utf-8', APP_JS);
    if (path === '/app.css') return sendText(response, 200, 'text/css; charset=utf-8', APP_CSS);
    if (path === '/favicon.ico') return sendText(response, 204, 'text/plain', '');
    if (path === '/login' && request.method === 'POST') {
      const origin = gate.crossOrigin(request);
      if (origin !== undefined) throw new HttpError(403, `cross-origin login from ${origin} refused`);
      const token = new URLSearchParams(await readBody(request)).get('token') ?? '';
      const cookie = gate.login(token);
      if (cookie === undefined)
        return sendText(
          response,
          401,
          'text/html; charset=utf-8',
          loginPage("That token is not the dashboard's token."),
        );
      return sendText(response, 303, 'text/plain; charset=utf-8', 'logged in\n', {
        location: '/',
        'set-cookie': cookie,
      });
    }
    if (path === '/logout' && request.method === 'POST') {
      const loggedOut = gate.logout(request, new URLSearchParams(await readBody(request)).get('csrf'));
      if ('reason' in loggedOut) throw new HttpError(loggedOut.status, loggedOut.reason);
      return sendText(response, 303, 'text/plain; charset=utf-8', 'logged out\n', {
        location: '/',
        'set-cookie': loggedOut.cookie,
      });
    }
    const access = gate.access(request);
    if (path.startsWith('/api/')) {
      if (access.kind === 'anonymous' && request.method !== 'POST')
        throw new HttpError(401, 'a token is required: log in, or send Authorization: Bearer <token>');
      return api(path, url.searchParams, request, access, response);
    }
    if (path !== '/' || request.method !== 'GET') throw new HttpError(404, 'not found');
    if (access.kind === 'anonymous') return sendText(response, 200, 'text/html; charset=utf-8', loginPage());
    const csrf = access.kind === 'bearer' ? '' : access.csrf;
    return sendText(
      response,
      200,
      'text/html; charset=utf-8',
      mainPage({ csrf, schema: options.schema, target: options.target, loggedIn: access.kind === 'session' }),
    );
  }

  const server: Server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (response.headersSent) {
        response.destroy();
        return;
      }
      if (error instanceof HttpError) return sendJson(response, error.status, { error: error.message });
      if (error instanceof InvalidInputError) return sendJson(response, 400, { error: error.message });
      const status = error instanceof RelayBusError && error.retryable ? 503 : 500;
      sendJson(response, status, {
        error: `the store failed: ${describeError(error)}`,
        ...(lastError ? { lastSampleError: lastError } : {}),
      });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch((error: unknown) => {
    clearInterval(sampler);
    throw error;
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    async close() {
      clearInterval(sampler);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
