import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import {
  AckPolicy,
  jetstream,
  jetstreamManager,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidOptionsError } from '../core/errors.js';
import { describeError } from '../core/logger.js';
import { RetryBackoff } from '../core/retry-backoff.js';
import { BrokerNotFoundError } from '../broker/broker-errors.js';
import { InboxEngine, type HeldMessage } from '../broker/inbox-engine.js';
import type { Inbox, InboxStopOptions } from '../broker/inbox-types.js';
import { defaultMapper, HEADERS, type InboundMessage } from '../broker/broker-message.js';
import {
  checkInboxBase,
  checkInboxNumbers,
  INBOX_DEFAULTS,
  type InboxOptionsBase,
  RECONNECT_BACKOFF,
} from '../broker/broker-options.js';
import { checkServers, connectNats, describeServers, jetStreamError, termTakesReason } from './nats-connection.js';
import { InboxLifecycle } from '../broker/inbox-lifecycle.js';

/**
 * The NATS JetStream inbox: a durable pull consumer turned into events of the bus, one store
 * transaction per batch, acknowledged after the commit (see `broker/inbox-engine.ts`). Poison
 * messages are published to the dead-letter subject with their reason (PubAck awaited), then
 * terminated (`+TERM`, with the reason on nats-server 2.11+), so JetStream never redelivers them.
 *
 * Ordering guarantee: with ONE inbox process per durable consumer, each key's events are published in
 * B in stream order, across restarts and reconnects too. JetStream redelivers a message left
 * unacknowledged (the previous process crashed, or the message was lost with the connection) only
 * after the consumer's ack wait, while NEW messages flow at once: they could overtake it (and the
 * redeliveries themselves come back in the order their ack waits expired). So when the inbox starts,
 * and after every reconnect, it compares the consumer's unacknowledged count with what it holds
 * itself; if others are outstanding it holds every message it receives (keeping them alive with
 * `working()`) until those came back, or twice the ack wait passed, and then handles all it holds
 * in stream order.
 * Several inbox processes on one durable consumer share its messages, and then order across them is
 * not guaranteed.
 */

export interface NatsInboxDeclare {
  /** Create the stream with these subjects if it does not exist. */
  readonly subjects?: readonly string[];
  /** The consumer's filter subject (default: the whole stream). */
  readonly filterSubject?: string;
}

export interface NatsInboxOptions<TTx> extends InboxOptionsBase<TTx> {
  /** `nats://host:4222`, or a list. */
  readonly servers: string | readonly string[];
  readonly stream: string;
  /** The durable consumer's name. */
  readonly consumer: string;
  /** Poison messages are published here (a subject some stream captures) with their reason, then terminated. */
  readonly deadLetter?: { readonly subject: string };
  /** Create the stream (when missing) and the durable consumer (when missing) on start. */
  readonly declare?: NatsInboxDeclare;
  /** The consumer's `max_ack_pending` when `declare` creates it. Default 200. */
  readonly maxAckPending?: number;
  /** The consumer's `ack_wait` when `declare` creates it. Default 30 s. */
  readonly ackWaitMs?: number;
  readonly connectionName?: string;
}

interface Gate {
  /** Messages up to this stream sequence were delivered before the gate: their redeliveries pass. */
  readonly seq: number;
  readonly needed: number;
  seen: number;
  readonly buffer: JsMsg[];
  timer: NodeJS.Timeout | undefined;
}

class NatsInbox<TTx> extends InboxLifecycle {
  readonly name: string;
  readonly #options: NatsInboxOptions<TTx>;
  readonly #servers: string[];
  readonly #broker: string;
  #engine: InboxEngine<TTx> | undefined;
  #nc: NatsConnection | undefined;
  #js: JetStreamClient | undefined;
  #jsm: JetStreamManager | undefined;
  #messages: ConsumerMessages | undefined;
  #consuming: Promise<void> | undefined;
  #connected = false;
  #ackWaitMs = 30_000;
  #gate: Gate | undefined;
  /** Stream sequences of the messages the inbox holds unsettled. */
  readonly #held = new Set<number>();
  #gateHeartbeat: NodeJS.Timeout | undefined;

  constructor(options: NatsInboxOptions<TTx>, servers: string[]) {
    super(options.logger);
    this.#options = options;
    this.#servers = servers;
    this.name = `nats ${options.stream}/${options.consumer}`;
    this.#broker = describeServers(servers);
  }

  protected isConnected(): boolean {
    return this.#connected;
  }

  protected async open(): Promise<void> {
    if (this.#options.setupStore !== false) await this.#options.bus.store.setup();
    const nc = await connectNats(
      this.#servers,
      this.#options.connectionName ?? `relaybus inbox ${this.#options.consumer}`,
      this.#options.connectTimeoutMs ?? INBOX_DEFAULTS.connectTimeoutMs,
    );
    this.#nc = nc;
    try {
      this.#jsm = await jetstreamManager(nc);
      this.#js = jetstream(nc);
      await this.#declareOrCheck();
    } catch (error) {
      await nc.close().catch(() => {});
      throw error;
    }
    this.#engine = new InboxEngine<TTx>({
      bus: this.#options.bus,
      map: this.#options.map ?? defaultMapper(this.#options.events ?? []),
      logger: this.logger,
      emitter: this.emitter,
      batchSize: this.#options.batchSize ?? INBOX_DEFAULTS.batchSize,
      concurrency: this.#options.concurrency ?? INBOX_DEFAULTS.concurrency,
      workingIntervalMs: Math.max(250, Math.floor(this.#ackWaitMs / 3)),
    });
    this.#connected = true;
    await this.#armGate();
    this.state = 'running';
    void this.#watchStatus(nc);
    this.#consuming = this.#consume();
    this.emitter.emit('connected', { broker: this.#broker, reconnect: false });
    this.logger.info(`consuming ${this.name} on ${this.#broker}`);
  }

  protected async close(options: InboxStopOptions): Promise<void> {
    await this.#messages?.close().catch(() => {});
    await this.#consuming?.catch(() => {});
    // Held-back messages wait for older ones that did not come back: give them back rather than overtake.
    const gate = this.#gate;
    this.#gate = undefined;
    clearTimeout(gate?.timer);
    for (const message of gate?.buffer ?? []) if (!this.#held.has(message.seq)) message.nak();
    await this.#engine?.drain(options.graceMs ?? this.#options.shutdownGraceMs ?? INBOX_DEFAULTS.shutdownGraceMs);
    clearInterval(this.#gateHeartbeat);
    try {
      await this.#nc?.drain();
    } catch {
      await this.#nc?.close().catch(() => {});
    }
  }

  async #declareOrCheck(): Promise<void> {
    const jsm = this.#jsm!;
    const { stream, consumer, declare } = this.#options;
    if (declare !== undefined) {
      try {
        await jsm.streams.info(stream);
      } catch (error) {
        const typed = jetStreamError(error, `stream "${stream}" on NATS at ${this.#broker}`);
        if (!(typed instanceof BrokerNotFoundError) || declare.subjects === undefined) throw typed;
        await jsm.streams.add({ name: stream, subjects: [...declare.subjects] }).catch((failure: unknown) => {
          throw jetStreamError(failure, `creating stream "${stream}"`);
        });
      }
      try {
        await jsm.consumers.info(stream, consumer);
      } catch {
        await jsm.consumers
          .add(stream, {
            durable_name: consumer,
            ack_policy: AckPolicy.Explicit,
            max_ack_pending: this.#options.maxAckPending ?? INBOX_DEFAULTS.prefetch,
            ack_wait: (this.#options.ackWaitMs ?? 30_000) * 1_000_000,
            ...(declare.filterSubject !== undefined ? { filter_subject: declare.filterSubject } : {}),
          })
          .catch((failure: unknown) => {
            throw jetStreamError(failure, `creating consumer "${consumer}" of stream "${stream}"`);
          });
      }
    }
    try {
      const info = await jsm.consumers.info(stream, consumer);
      this.#ackWaitMs = Math.max(1_000, Math.floor((info.config.ack_wait ?? 30_000_000_000) / 1_000_000));
    } catch (error) {
      throw jetStreamError(error, `consumer "${consumer}" of stream "${stream}" on NATS at ${this.#broker}`);
    }
  }

  /** Consume until stopped; a consume that ends (consumer reset, server gone for long) starts again after a backoff. */
  async #consume(): Promise<void> {
    const backoff = new RetryBackoff(RECONNECT_BACKOFF);
    while (this.state === 'running') {
      try {
        const consumer = await this.#js!.consumers.get(this.#options.stream, this.#options.consumer);
        const messages = await consumer.consume({
          max_messages: Math.min(this.#options.maxAckPending ?? INBOX_DEFAULTS.prefetch, 256),
          idle_heartbeat: 5_000,
          expires: 30_000,
        });
        this.#messages = messages;
        backoff.succeeded();
        for await (const message of messages) this.#onMessage(message);
      } catch (error) {
        this.lastError = describeError(error);
        this.logger.warn(`consuming ${this.name} failed; consuming again after a backoff`, {
          error: describeError(error),
        });
      }
      if (this.state !== 'running') return;
      try {
        await sleep(backoff.failed(), undefined, { signal: this.stopped.signal });
      } catch {
        return;
      }
    }
  }

  async #watchStatus(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect') {
        this.#connected = false;
        // Hold everything until the gate is computed again after the reconnect.
        this.#gate ??= {
          seq: Number.MAX_SAFE_INTEGER,
          needed: Number.MAX_SAFE_INTEGER,
          seen: 0,
          buffer: [],
          timer: undefined,
        };
        this.emitter.emit('disconnected', { broker: this.#broker, error: new Error('disconnected'), retryInMs: 250 });
        this.logger.warn(`lost the connection of ${this.name} to ${this.#broker}; the client reconnects`);
      } else if (status.type === 'reconnect') {
        this.#connected = true;
        this.lastError = undefined;
        this.emitter.emit('connected', { broker: this.#broker, reconnect: true });
        this.logger.info(`reconnected ${this.name} to ${this.#broker}`);
        void this.#armGate().catch((error: unknown) =>
          this.#openGate(`the consumer could not be read (${describeError(error)})`, true),
        );
      }
    }
  }

  /**
   * Hold back new messages while messages delivered earlier are unacknowledged and not ours (a dead
   * process's, or lost with a connection): they come back after the ack wait and must go first.
   */
  async #armGate(): Promise<void> {
    const provisional = this.#gate;
    await this.#nc!.flush(); // our acks sent so far are counted before the consumer is read
    const info = await this.#jsm!.consumers.info(this.#options.stream, this.#options.consumer);
    const delivered = info.delivered.stream_seq;
    const ours = [...this.#held].filter((seq) => seq <= delivered).length;
    const needed = info.num_ack_pending - ours;
    const buffered = provisional?.buffer ?? [];
    if (provisional !== undefined) clearTimeout(provisional.timer);
    if (needed <= 0) {
      this.#gate = undefined;
      for (const message of buffered.sort((x, y) => x.seq - y.seq)) this.#onMessage(message);
      return;
    }
    const gate: Gate = { seq: delivered, needed, seen: 0, buffer: [], timer: undefined };
    gate.timer = setTimeout(
      () =>
        this.#openGate(
          `${gate.needed - gate.seen} of ${gate.needed} outstanding messages did not come back within twice the ack wait`,
          true,
        ),
      2 * this.#ackWaitMs + 1_000,
    );
    gate.timer.unref();
    this.#gate = gate;
    this.emitter.emit('held-back', { outstanding: needed, ackWaitMs: this.#ackWaitMs });
    this.logger.info(
      `${this.name}: ${needed} messages delivered earlier are unacknowledged; newer messages wait until they are redelivered (ack wait ${this.#ackWaitMs} ms), then all go in stream order`,
    );
    this.#gateHeartbeat ??= setInterval(
      () => {
        for (const message of this.#gate?.buffer ?? []) message.working();
      },
      Math.max(250, Math.floor(this.#ackWaitMs / 3)),
    );
    this.#gateHeartbeat.unref();
    for (const message of buffered) this.#onMessage(message);
  }

  #openGate(why: string, warn: boolean): void {
    const gate = this.#gate;
    if (gate === undefined) return;
    this.#gate = undefined;
    clearTimeout(gate.timer);
    if (warn) this.logger.warn(`${this.name}: releasing ${gate.buffer.length} held-back messages: ${why}`);
    for (const message of gate.buffer.sort((x, y) => x.seq - y.seq)) this.#onMessage(message);
  }

  #onMessage(raw: JsMsg): void {
    const gate = this.#gate;
    if (gate !== undefined) {
      // Everything waits, the redeliveries too: they come back in the order their ack waits expired,
      // not in stream order, so the gate releases them all sorted by stream sequence.
      gate.buffer.push(raw);
      if (raw.seq <= gate.seq && !this.#held.has(raw.seq)) gate.seen += 1;
      if (gate.seen >= gate.needed) this.#openGate('every outstanding message came back', false);
      return;
    }
    if (this.state !== 'running' && this.state !== 'stopping') {
      raw.nak();
      return;
    }
    this.#held.add(raw.seq);
    this.#engine!.push(this.#hold(raw));
  }

  #hold(raw: JsMsg): HeldMessage {
    const h = raw.headers;
    const get = (name: string): string | undefined => {
      if (h === undefined) return undefined;
      const key = h.keys().find((candidate) => candidate.toLowerCase() === name.toLowerCase());
      const value = key === undefined ? '' : h.get(key);
      return value === '' ? undefined : value;
    };
    const app: Record<string, string> = {};
    for (const key of h?.keys() ?? []) {
      const lower = key.toLowerCase();
      if (lower.startsWith('nats-') || lower.startsWith('relaybus-')) continue;
      app[key] = h!.get(key);
    }
    const message: InboundMessage = {
      id: get('Nats-Msg-Id'),
      type: get(HEADERS.type),
      key: get(HEADERS.key) ?? null,
      headers: app,
      body: raw.data,
      redelivered: raw.redelivered,
      source: `stream ${this.#options.stream} seq ${raw.seq}`,
    };
    const done = () => this.#held.delete(raw.seq);
    return {
      message,
      ack: () => {
        done();
        raw.ack();
      },
      requeue: () => {
        done();
        raw.nak();
      },
      working: () => raw.working(),
      deadLetter: async (reason, detail) => {
        const { deadLetter, stream } = this.#options;
        if (deadLetter !== undefined) {
          const dh = natsHeaders();
          for (const key of h?.keys() ?? []) if (!key.toLowerCase().startsWith('nats-')) dh.set(key, h!.get(key));
          if (message.id !== undefined) dh.set('Relaybus-Original-Msg-Id', message.id);
          dh.set(HEADERS.deadReason, reason);
          dh.set(HEADERS.deadDetail, detail.replace(/[\r\n]+/g, ' '));
          dh.set(HEADERS.deadSource, message.source);
          try {
            // The msg id makes a second dead-lettering of the same stream message (after a crash) a duplicate.
            await this.#js!.publish(deadLetter.subject, raw.data, {
              msgID: `relaybus-dead:${stream}:${raw.seq}`,
              headers: dh,
            });
          } catch (error) {
            throw jetStreamError(error, `dead-letter subject "${deadLetter.subject}"`);
          }
        }
        done();
        if (termTakesReason(this.#nc?.info?.version)) raw.term(`${reason}: ${detail}`.slice(0, 200));
        else raw.term();
      },
    };
  }
}

/**
 * An inbox on a NATS JetStream durable consumer.
 *
 * ```ts
 * const inbox = natsInbox({ bus, servers: 'nats://localhost:4222', stream: 'ORDERS', consumer: 'orders-b',
 *   events: [OrderPlaced], deadLetter: { subject: 'orders.dead' }, declare: { subjects: ['orders.>'] } });
 * await inbox.start();
 * ```
 */
export function natsInbox<TTx>(options: NatsInboxOptions<TTx>): Inbox {
  const where = 'natsInbox';
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError(`${where}: options are required: { bus, servers, stream, consumer, events }.`);
  const servers = checkServers(options.servers, where);
  for (const name of ['stream', 'consumer'] as const) {
    if (typeof options[name] !== 'string' || options[name] === '' || /[\s.*>]/.test(options[name])) {
      throw new InvalidOptionsError(
        `${where}: \`${name}\` must be a JetStream name (no spaces, dots or wildcards), got ${JSON.stringify(options[name])}.`,
      );
    }
  }
  checkInboxBase(where, options, 'stream');
  checkInboxNumbers(where, { maxAckPending: options.maxAckPending, ackWaitMs: options.ackWaitMs });
  return new NatsInbox(options, servers);
}
