import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describeError, type Logger } from '../core/logger.js';
import type { RelayBusHealth } from '../dispatcher/dispatcher.js';
import { observeBus, type BusObservation } from '../telemetry/metrics.js';
import { PROMETHEUS_CONTENT_TYPE, PrometheusRegistry } from '../telemetry/prometheus.js';
import type { WorkerBus } from './config-loader.js';

/**
 * `relaybus worker --metrics-port`: a node:http server with three routes.
 *
 * - `GET /metrics`: the bus's metrics (see `telemetry/metrics.ts`) in the Prometheus text format.
 * - `GET /healthz`: 200 while the process runs (liveness).
 * - `GET /readyz`: 200 while the store answers and the dispatcher is claiming (`bus.health().ready`
 *   and the bus running), else 503; the body says why, as JSON.
 *
 * The server is the worker's servant, never its master: a port that is in use is logged (with the
 * fix) and tried again every `LISTEN_RETRY_MS`, while the worker keeps delivering.
 */

/** How long the worker waits before trying a busy metrics port again. */
export const LISTEN_RETRY_MS = 10_000;

export interface WorkerMetricsOptions {
  readonly port: number;
  readonly host: string;
  /** Backlog sampling interval (`store.statistics()`). */
  readonly statisticsIntervalMs: number;
  readonly logger: Logger;
}

/** The worker's metrics server. */
export interface WorkerMetrics {
  /** `http://host:port` once listening. */
  readonly url: string | undefined;
  /** Resolves once the first listen attempt is over (listening, or failed and retrying). */
  readonly started: Promise<void>;
  readonly observation: BusObservation;
  close(): Promise<void>;
}

/** The readiness of `bus`: ready while its last claim succeeded and it runs. */
export function readinessOf(bus: WorkerBus): {
  readonly ready: boolean;
  readonly state: string;
  readonly health?: RelayBusHealth;
} {
  const withHealth = bus as WorkerBus & { health?: () => RelayBusHealth };
  if (typeof withHealth.health !== 'function') return { ready: bus.state === 'running', state: bus.state };
  const health = withHealth.health();
  return { ready: health.ready && bus.state === 'running', state: bus.state, health };
}

function send(response: ServerResponse, status: number, type: string, body: string): void {
  response.writeHead(status, {
    'content-type': type,
    'cache-control': 'no-store',
    'content-length': Buffer.byteLength(body),
  });
  response.end(body);
}

/** Serve `/metrics`, `/healthz` and `/readyz` for `bus`; see the module header. */
export function serveWorkerMetrics(bus: WorkerBus, options: WorkerMetricsOptions): WorkerMetrics {
  const { logger } = options;
  const registry = new PrometheusRegistry();
  const observation = observeBus(bus, registry, { statisticsIntervalMs: options.statisticsIntervalMs, logger });
  registry
    .createObservableGauge('relaybus.ready', {
      description: '1 while the worker is ready (its store answers and it claims), else 0.',
    })
    .addCallback((result) => result.observe(readinessOf(bus).ready ? 1 : 0));

  const handle = (request: IncomingMessage, response: ServerResponse): void => {
    const path = (request.url ?? '/').split('?')[0];
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.setHeader('allow', 'GET, HEAD');
      send(response, 405, 'text/plain; charset=utf-8', 'method not allowed\n');
      return;
    }
    if (path === '/metrics') {
      registry.render().then(
        (text) => send(response, 200, PROMETHEUS_CONTENT_TYPE, text),
        (error: unknown) =>
          send(response, 500, 'text/plain; charset=utf-8', `rendering the metrics failed: ${describeError(error)}\n`),
      );
    } else if (path === '/healthz') {
      send(response, 200, 'application/json', JSON.stringify({ alive: true, state: bus.state }) + '\n');
    } else if (path === '/readyz') {
      const readiness = readinessOf(bus);
      const sample = observation.lastSample;
      const body = {
        ...readiness,
        ...(sample === undefined ? {} : { backlogSampledAt: sample.at.toISOString() }),
        ...(observation.lastSampleError === undefined ? {} : { backlogError: observation.lastSampleError }),
      };
      send(response, readiness.ready ? 200 : 503, 'application/json', JSON.stringify(body) + '\n');
    } else {
      send(response, 404, 'text/plain; charset=utf-8', 'not found: the routes are /metrics, /healthz and /readyz\n');
    }
  };

  const server: Server = createServer(handle);
  server.keepAliveTimeout = 5_000;
  let url: string | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let failures = 0;
  const where = `${options.host.includes(':') ? `[${options.host}]` : options.host}:${options.port}`;

  const listen = (): Promise<void> =>
    new Promise<void>((resolve) => {
      const onError = (error: NodeJS.ErrnoException): void => {
        server.off('listening', onListening);
        failures += 1;
        const why =
          error.code === 'EADDRINUSE'
            ? `the port is in use (another worker's --metrics-port, a dashboard, or another exporter); pick another --metrics-port`
            : error.code === 'EADDRNOTAVAIL'
              ? `${options.host} is not an address of this machine; check --metrics-host`
              : describeError(error);
        const message = `the metrics server cannot listen on ${where}: ${why}. The worker keeps delivering; retrying every ${LISTEN_RETRY_MS / 1000}s`;
        if (failures === 1) logger.error(message, { error: describeError(error) });
        else logger.debug(message, { attempt: failures });
        if (!closed) {
          retry = setTimeout(() => void listen(), LISTEN_RETRY_MS);
          retry.unref();
        }
        resolve();
      };
      const onListening = (): void => {
        server.off('error', onError);
        const address = server.address() as AddressInfo;
        const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
        url = `http://${host}:${address.port}`;
        logger.info(
          `metrics on ${url}/metrics, liveness on ${url}/healthz, readiness on ${url}/readyz`,
          failures > 0 ? { failedAttempts: failures } : undefined,
        );
        resolve();
      };
      server.once('error', onError);
      server.once('listening', onListening);
      server.listen(options.port, options.host);
    });
  const started = listen();

  return {
    get url() {
      return url;
    },
    started,
    observation,
    async close() {
      closed = true;
      clearTimeout(retry);
      observation.stop();
      if (!server.listening) return;
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
