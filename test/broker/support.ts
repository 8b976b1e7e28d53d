/**
 * Support for the broker tests: find RabbitMQ and NATS JetStream (or a skip reason: never a silent
 * pass), a Postgres schema per test file, unique queue names, RabbitMQ admin through its own
 * connection (declare, publish raw messages, read a dead-letter queue, delete), and a forced close of
 * OUR connections only (`rabbitmqctl close_connection` by connection name: the broker is shared, so
 * neither a restart nor close_all_connections).
 */
import amqp from 'amqplib';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';

const execFileAsync = promisify(execFile);

export const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

/** undefined when RabbitMQ answers at AMQP_URL; otherwise why the suite is skipped. */
export async function probeRabbit(): Promise<string | undefined> {
  try {
    const connection = await amqp.connect(AMQP_URL, { timeout: 2_000 });
    await connection.close();
    return undefined;
  } catch (error) {
    return `no RabbitMQ at ${AMQP_URL.replace(/:[^:@/]*@/, ':***@')} (${(error as Error).message || String((error as { code?: string }).code)}); set AMQP_URL or start RabbitMQ to run these tests`;
  }
}

/** The reason to skip a suite that needs Postgres and RabbitMQ, or undefined. */
export async function rabbitSkip(): Promise<string | undefined> {
  const postgres = await findPostgres();
  if ('skip' in postgres) return postgres.skip;
  return probeRabbit();
}

export async function postgresUrlOrEmpty(): Promise<string> {
  const found = await findPostgres();
  return 'url' in found ? found.url : '';
}

let names = 0;
/** A queue/exchange name no other test or process uses. */
export function uniqueName(label: string): string {
  names += 1;
  return `rbtest.${label}.${process.pid}.${Date.now().toString(36)}.${names}`;
}

/** A relaybus schema of its own in Postgres. */
export interface TestSchema {
  readonly url: string;
  readonly schema: string;
  readonly pool: pg.Pool;
  readonly store: PostgresStore<PgClientLike>;
  /** `SELECT count(*)` of a table of the schema. */
  count(table: string, where?: string): Promise<number>;
  /** The deliveries left (at most 20) and the lanes that hold any, for a failure message. */
  leftovers(): Promise<{ deliveries: unknown[]; lanes: unknown[] }>;
  drop(): Promise<void>;
}

export async function openSchema(label: string, options: { readonly poolMax?: number } = {}): Promise<TestSchema> {
  const url = await postgresUrlOrEmpty();
  const schema = uniqueSchemaName(label);
  const pool = new pg.Pool({
    connectionString: url,
    max: options.poolMax ?? 6,
    application_name: `relaybus-test-${label}`,
  });
  pool.on('error', () => {});
  const store = postgresStore({ driver: fromPg(pool), schema });
  await store.setup();
  return {
    url,
    schema,
    pool,
    store,
    async count(table, where = 'true') {
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".${table} WHERE ${where}`);
      return (rows[0] as { n: number }).n;
    },
    async leftovers() {
      const deliveries = await pool.query(
        `SELECT id, lane, handler, key, sequence, status, attempts, claims, available_at, last_error FROM "${schema}".relaybus_deliveries ORDER BY lane, handler, key, sequence LIMIT 20`,
      );
      const lanes = await pool.query(
        `SELECT l.* FROM "${schema}".relaybus_lanes l WHERE lease_owner IS NOT NULL OR cardinality(in_flight) > 0 OR lane IN (SELECT lane FROM "${schema}".relaybus_deliveries)`,
      );
      return { deliveries: deliveries.rows, lanes: lanes.rows };
    },
    async drop() {
      try {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await pool.end();
      }
    },
  };
}

/** A raw message for `RabbitAdmin.publish`. */
export interface RawMessage {
  readonly body: string | Buffer;
  readonly messageId?: string;
  readonly type?: string;
  readonly headers?: Record<string, string>;
}

/** The test's own RabbitMQ connection: topology, raw publishes (with confirms), reading queues. */
export class RabbitAdmin {
  readonly #connection: amqp.ChannelModel;
  readonly #channel: amqp.ConfirmChannel;
  readonly #queues = new Set<string>();
  readonly #exchanges = new Set<string>();

  private constructor(connection: amqp.ChannelModel, channel: amqp.ConfirmChannel) {
    this.#connection = connection;
    this.#channel = channel;
  }

  static async open(): Promise<RabbitAdmin> {
    const connection = await amqp.connect(AMQP_URL, {
      clientProperties: { connection_name: `relaybus-test-admin-${process.pid}` },
    });
    connection.on('error', () => {});
    const channel = await connection.createConfirmChannel();
    channel.on('error', () => {});
    return new RabbitAdmin(connection, channel);
  }

  /** Remember a queue/exchange the code under test declared, to delete it in `close()`. */
  track(kind: 'queue' | 'exchange', name: string): void {
    (kind === 'queue' ? this.#queues : this.#exchanges).add(name);
  }

  async queue(name: string, args: Record<string, unknown> = {}): Promise<void> {
    this.#queues.add(name);
    await this.#channel.assertQueue(name, { durable: true, arguments: args });
  }

  async exchange(name: string, type: 'direct' | 'topic' | 'fanout' = 'topic'): Promise<void> {
    this.#exchanges.add(name);
    await this.#channel.assertExchange(name, type, { durable: true });
  }

  async bind(queue: string, exchange: string, routingKey: string): Promise<void> {
    await this.#channel.bindQueue(queue, exchange, routingKey);
  }

  /** Publish to a queue (default exchange) and wait for the confirms. */
  async publish(queue: string, messages: readonly RawMessage[]): Promise<void> {
    for (const message of messages) {
      this.#channel.sendToQueue(queue, Buffer.isBuffer(message.body) ? message.body : Buffer.from(message.body), {
        persistent: true,
        ...(message.messageId !== undefined ? { messageId: message.messageId } : {}),
        ...(message.type !== undefined ? { type: message.type } : {}),
        ...(message.headers !== undefined ? { headers: message.headers } : {}),
      });
    }
    await this.#channel.waitForConfirms();
  }

  /** Take every message of a queue (acked). */
  async drain(queue: string): Promise<amqp.GetMessage[]> {
    const messages: amqp.GetMessage[] = [];
    for (;;) {
      const message = await this.#channel.get(queue, { noAck: true });
      if (message === false) return messages;
      messages.push(message);
    }
  }

  /** Ready and unacknowledged counts... RabbitMQ reports only ready messages and consumers here. */
  async depth(queue: string): Promise<{ messageCount: number; consumerCount: number }> {
    return this.#channel.checkQueue(queue);
  }

  async close(): Promise<void> {
    for (const queue of this.#queues) await this.#channel.deleteQueue(queue).catch(() => {});
    for (const exchange of this.#exchanges) await this.#channel.deleteExchange(exchange).catch(() => {});
    await this.#connection.close().catch(() => {});
  }
}

/**
 * Force-close every RabbitMQ connection whose `connection_name` starts with `prefix` (ours only; the
 * broker is shared). Resolves with how many were closed.
 */
export async function closeRabbitConnections(prefix: string): Promise<number> {
  const { stdout } = await execFileAsync(
    'rabbitmqctl',
    ['list_connections', 'pid', 'client_properties', '-q', '--no-table-headers'],
    { timeout: 30_000 },
  );
  const pids: string[] = [];
  for (const line of stdout.split('\n')) {
    const match = /^(<[^>]+>)\s.*\{"connection_name","([^"]*)"\}/.exec(line);
    if (match && match[2]!.startsWith(prefix)) pids.push(match[1]!);
  }
  for (const pid of pids) {
    await execFileAsync('rabbitmqctl', ['close_connection', pid, 'relaybus test: forced close'], {
      timeout: 30_000,
    }).catch(() => {});
  }
  return pids.length;
}

/** Poll until `probe` returns a value (not undefined); fail after `timeoutMs` naming `what`. */
export async function until<T>(
  probe: () => Promise<T | undefined>,
  what: string,
  timeoutMs: number,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for: ${what}${last ? ` (last error: ${(last as Error).message})` : ''}`,
      );
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * A TCP proxy in front of a broker that the test can take down (every connection cut, the port
 * refusing) and bring back on the same port: a broker restart as the clients see it, without
 * touching the machine's shared broker.
 */
export class TcpProxy {
  readonly port: number;
  readonly #target: { host: string; port: number };
  #server: import('node:net').Server | undefined;
  readonly #sockets = new Set<import('node:net').Socket>();

  private constructor(port: number, target: { host: string; port: number }) {
    this.port = port;
    this.#target = target;
  }

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const net = await import('node:net');
    const probe = net.createServer();
    const port = await new Promise<number>((resolve) =>
      probe.listen(0, '127.0.0.1', () => resolve((probe.address() as import('node:net').AddressInfo).port)),
    );
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const proxy = new TcpProxy(port, target);
    await proxy.up();
    return proxy;
  }

  /** Listen again (after `down`). */
  async up(): Promise<void> {
    const net = await import('node:net');
    const server = net.createServer((client) => {
      const upstream = net.connect(this.#target.port, this.#target.host);
      this.#sockets.add(client);
      this.#sockets.add(upstream);
      const end = () => {
        client.destroy();
        upstream.destroy();
        this.#sockets.delete(client);
        this.#sockets.delete(upstream);
      };
      client.on('error', end).on('close', end);
      upstream.on('error', end).on('close', end);
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', () => resolve()));
    this.#server = server;
  }

  /** Cut every connection and stop listening: connects are refused until `up`. */
  async down(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** The URL of `url` with its host and port replaced by the proxy's. */
  url(url: string): string {
    const parsed = new URL(url);
    parsed.hostname = '127.0.0.1';
    parsed.port = String(this.port);
    return parsed.toString().replace(/\/$/, '');
  }
}

/** undefined when NATS with JetStream answers at NATS_URL; otherwise why the suite is skipped. */
export async function probeNats(): Promise<string | undefined> {
  try {
    const { connect } = await import('@nats-io/transport-node');
    const { jetstreamManager } = await import('@nats-io/jetstream');
    const nc = await connect({ servers: NATS_URL, timeout: 2_000, reconnect: false });
    try {
      await (await jetstreamManager(nc)).getAccountInfo();
    } finally {
      await nc.close();
    }
    return undefined;
  } catch (error) {
    return `no NATS with JetStream at ${NATS_URL} (${(error as Error).message}); set NATS_URL or start nats-server -js to run these tests`;
  }
}

/** The reason to skip a suite that needs Postgres and NATS JetStream, or undefined. */
export async function natsSkip(): Promise<string | undefined> {
  const postgres = await findPostgres();
  if ('skip' in postgres) return postgres.skip;
  return probeNats();
}

/**
 * A nats-server with JetStream that the test owns (its own port and store directory), so it can be
 * killed and restarted without touching the machine's shared server.
 */
export class PrivateNats {
  readonly port: number;
  readonly dir: string;
  #process: import('node:child_process').ChildProcess | undefined;

  private constructor(port: number, dir: string) {
    this.port = port;
    this.dir = dir;
  }

  static readonly BINARY = process.env.NATS_SERVER_BIN ?? '/usr/sbin/nats-server';

  /** Why a private server cannot run here, or undefined. */
  static async unavailable(): Promise<string | undefined> {
    const { existsSync } = await import('node:fs');
    return existsSync(PrivateNats.BINARY)
      ? undefined
      : `no nats-server binary at ${PrivateNats.BINARY} (set NATS_SERVER_BIN) to restart a private server`;
  }

  static async start(): Promise<PrivateNats> {
    const net = await import('node:net');
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const probe = net.createServer();
    const port = await new Promise<number>((resolve) =>
      probe.listen(0, '127.0.0.1', () => resolve((probe.address() as import('node:net').AddressInfo).port)),
    );
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const server = new PrivateNats(port, mkdtempSync(join(tmpdir(), 'relaybus-nats-')));
    await server.up();
    return server;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** Start the server (again, on the same port and store directory) and wait until it accepts connections. */
  async up(): Promise<void> {
    const { spawn } = await import('node:child_process');
    const net = await import('node:net');
    this.#process = spawn(PrivateNats.BINARY, ['-js', '-a', '127.0.0.1', '-p', String(this.port), '-sd', this.dir], {
      stdio: 'ignore',
    });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const ok = await new Promise<boolean>((resolve) => {
        const socket = net.connect(this.port, '127.0.0.1', () => {
          socket.destroy();
          resolve(true);
        });
        socket.on('error', () => resolve(false));
      });
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`the private nats-server on port ${this.port} did not start`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** SIGKILL the server (a crash: the clients see their connections drop). */
  async kill(): Promise<void> {
    const child = this.#process;
    this.#process = undefined;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  async destroy(): Promise<void> {
    await this.kill();
    const { rmSync } = await import('node:fs');
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * Per key, whether B published the events (`payload.n` ascending in producer order) in that order:
 * reads the pending deliveries of `handler` (the test does not run it) with their key sequence.
 */
export async function keyOrderViolations(
  db: TestSchema,
  idPrefix: string,
  handler: string,
): Promise<{ rows: number; violations: string[] }> {
  const { rows } = await db.pool.query(
    `SELECT d.key, d.sequence::int AS sequence, (e.payload->>'n')::int AS n FROM "${db.schema}".relaybus_deliveries d
     JOIN "${db.schema}".relaybus_events e ON e.id = d.event_id
     WHERE d.event_id LIKE $1 AND d.handler = $2 ORDER BY d.key, d.sequence`,
    [`${idPrefix}%`, handler],
  );
  const violations: string[] = [];
  let previous: { key: string; n: number } | undefined;
  for (const row of rows as { key: string; n: number }[]) {
    if (previous?.key === row.key && row.n < previous.n)
      violations.push(`${row.key}: n=${row.n} after n=${previous.n}`);
    previous = row;
  }
  return { rows: rows.length, violations };
}

/** Kafka brokers for the Kafka tests (`host:port`, comma separated); none on this project's machines. */
export const KAFKA_BROKERS = process.env.KAFKA_BROKERS;

/** The reason to skip a suite that needs Postgres and Kafka, or undefined. */
export async function kafkaSkip(): Promise<string | undefined> {
  const postgres = await findPostgres();
  if ('skip' in postgres) return postgres.skip;
  if (KAFKA_BROKERS === undefined || KAFKA_BROKERS.trim() === '')
    return 'KAFKA_BROKERS is not set (no Kafka broker here); set it to host:9092 to run the Kafka relay and inbox tests';
  try {
    const { Kafka, logLevel } = await import('kafkajs');
    const admin = new Kafka({
      brokers: KAFKA_BROKERS.split(','),
      logLevel: logLevel.NOTHING,
      connectionTimeout: 3_000,
      retry: { retries: 1 },
    }).admin();
    await admin.connect();
    await admin.listTopics();
    await admin.disconnect();
    return undefined;
  } catch (error) {
    return `no Kafka at ${KAFKA_BROKERS} (${(error as Error).message})`;
  }
}

/** Wait until `handler` of the bus's store has nothing pending or in flight (the relay sent everything). */
export async function handlerDrained(
  store: { statistics(): Promise<{ handlers: Record<string, { pending: number; inFlight: number }> }> },
  handler: string,
  timeoutMs: number,
): Promise<void> {
  await until(
    async () => {
      const mine = (await store.statistics()).handlers[handler];
      return mine === undefined || mine.pending + mine.inFlight === 0 ? true : undefined;
    },
    `${handler} completed every delivery`,
    timeoutMs,
  );
}
