import type amqp from 'amqplib';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidOptionsError } from '../core/errors.js';
import { describeError } from '../core/logger.js';
import { RetryBackoff } from '../core/retry-backoff.js';
import { redactUrl } from '../broker/broker-errors.js';
import { InboxEngine, type HeldMessage } from '../broker/inbox-engine.js';
import type { Inbox, InboxStopOptions } from '../broker/inbox-types.js';
import { applicationHeaders, defaultMapper, HEADERS, type InboundMessage } from '../broker/broker-message.js';
import {
  checkInboxBase,
  checkInboxNumbers,
  INBOX_DEFAULTS,
  type InboxOptionsBase,
  RECONNECT_BACKOFF,
} from '../broker/broker-options.js';
import { channelError, checkAmqpUrl, closeQuietly, connectAmqp } from './amqp-connection.js';
import { InboxLifecycle } from '../broker/inbox-lifecycle.js';

/**
 * The RabbitMQ inbox: consumes one queue and turns each message into an event of the bus, in one
 * store transaction per batch, acknowledged after the commit (see `broker/inbox-engine.ts`).
 *
 * Ordering guarantee: with ONE active consumer on the queue (a single inbox, or several on a queue
 * declared with `x-single-active-consumer`, which `declare` does), each key's events are published in
 * B in queue order, across crashes and reconnects too: the inbox publishes a key's messages one
 * batch at a time in delivery order, retries a failing batch in place instead of requeueing it, and
 * when its connection dies RabbitMQ puts every unacknowledged message back at its position, ahead of
 * the ones never delivered; the next consumer gets them first and the ones already committed are
 * duplicates that add nothing. Several competing consumers on a plain queue split one key's
 * messages between them, and then order across them is not guaranteed.
 */

/** A dead-letter route: the exchange (and routing key) a poison message is republished to, with its reason. */
export interface AmqpDeadLetter {
  readonly exchange: string;
  /** Default: the queue's name. */
  readonly routingKey?: string;
}

/** Topology the inbox declares on every (re)connect; without it the queue must exist. */
export interface AmqpInboxDeclare {
  /** Exchanges to bind the queue to (declared durable, of `type`, default `topic`). */
  readonly bindings?: readonly {
    readonly exchange: string;
    readonly routingKey: string;
    readonly type?: 'direct' | 'topic' | 'fanout';
  }[];
  /** The queue the dead-letter exchange routes to. Default `<queue>.dead` (when `deadLetter` is set). */
  readonly deadLetterQueue?: string;
  /** Declare the queue with `x-single-active-consumer` (one inbox consumes at a time; the others wait). Default true. */
  readonly singleActiveConsumer?: boolean;
}

export interface AmqpInboxOptions<TTx> extends InboxOptionsBase<TTx> {
  /** `amqp://user:password@host:5672/vhost`. */
  readonly url: string;
  readonly queue: string;
  /** Where poison messages go, with their reason in headers. Without it they are rejected to the queue's own dead-letter exchange. */
  readonly deadLetter?: AmqpDeadLetter;
  readonly declare?: AmqpInboxDeclare;
  /** Unacknowledged messages RabbitMQ sends ahead (basic.qos). Default 200. */
  readonly prefetch?: number;
  /** Shown in RabbitMQ's connection list. Default `relaybus inbox <queue>`. */
  readonly connectionName?: string;
}

interface Session {
  readonly model: amqp.ChannelModel;
  readonly channel: amqp.ConfirmChannel;
  consumerTag: string;
  /** Serialises dead-letter publishes, so a basic.return belongs to the publish being confirmed. */
  deadLetterChain: Promise<void>;
  closed: boolean;
}

class AmqpInbox<TTx> extends InboxLifecycle {
  readonly name: string;
  readonly #options: AmqpInboxOptions<TTx>;
  readonly #engine: InboxEngine<TTx>;
  readonly #broker: string;
  #session: Session | undefined;
  #reconnecting: Promise<void> | undefined;

  constructor(options: AmqpInboxOptions<TTx>) {
    super(options.logger);
    this.#options = options;
    this.name = `amqp queue ${options.queue}`;
    this.#broker = redactUrl(options.url);
    const map = options.map ?? defaultMapper(options.events ?? []);
    this.#engine = new InboxEngine<TTx>({
      bus: options.bus,
      map,
      logger: this.logger,
      emitter: this.emitter,
      batchSize: options.batchSize ?? INBOX_DEFAULTS.batchSize,
      concurrency: options.concurrency ?? INBOX_DEFAULTS.concurrency,
    });
  }

  protected isConnected(): boolean {
    return this.#session !== undefined && !this.#session.closed;
  }

  protected async open(): Promise<void> {
    if (this.#options.setupStore !== false) await this.#options.bus.store.setup();
    await this.#connect(false);
    this.state = 'running';
  }

  protected async close(options: InboxStopOptions): Promise<void> {
    const session = this.#session;
    if (session !== undefined && !session.closed) {
      try {
        await session.channel.cancel(session.consumerTag); // no new deliveries; held ones finish below
      } catch {
        // the channel is gone: RabbitMQ requeued what it held
      }
    }
    await this.#engine.drain(options.graceMs ?? this.#options.shutdownGraceMs ?? INBOX_DEFAULTS.shutdownGraceMs);
    await this.#reconnecting?.catch(() => {});
    const last = this.#session;
    if (last !== undefined) {
      last.closed = true;
      await closeQuietly(last.channel);
      await closeQuietly(last.model);
    }
  }

  /** Connect, declare or check the queue, consume. Typed errors; nothing left open on failure. */
  async #connect(reconnect: boolean): Promise<void> {
    const { url, queue } = this.#options;
    const model = await connectAmqp(
      url,
      this.#options.connectionName ?? `relaybus inbox ${queue}`,
      this.#options.connectTimeoutMs ?? INBOX_DEFAULTS.connectTimeoutMs,
    );
    let session: Session | undefined;
    // Errors before 'close' would be thrown as unhandled 'error' events: listen from the first moment.
    model.on('error', (error: Error) =>
      this.logger.debug('RabbitMQ connection error', { error: describeError(error) }),
    );
    try {
      await this.#declareOrCheck(model);
      const channel = await model.createConfirmChannel();
      channel.on('error', (error: Error) =>
        this.logger.debug('RabbitMQ channel error', { error: describeError(error) }),
      );
      await channel.prefetch(this.#options.prefetch ?? INBOX_DEFAULTS.prefetch);
      // Deliveries can arrive before consume() resolves (same network read): the session exists first.
      const current: Session = { model, channel, consumerTag: '', deadLetterChain: Promise.resolve(), closed: false };
      session = current;
      const lost = (error?: unknown) => this.#onLost(current, error);
      model.on('close', lost);
      channel.on('close', () => lost(new Error('the channel closed')));
      const { consumerTag } = await channel.consume(queue, (message) => this.#onMessage(current, message), {
        noAck: false,
      });
      current.consumerTag = consumerTag;
    } catch (error) {
      if (session !== undefined) session.closed = true;
      await closeQuietly(model);
      throw error;
    }
    this.#session = session;
    this.lastError = undefined;
    this.emitter.emit('connected', { broker: this.#broker, reconnect });
    this.logger.info(`${reconnect ? 'reconnected to' : 'consuming'} ${this.name} on ${this.#broker}`);
  }

  /** Declare the topology (`declare`), or check that the queue exists (a 404 closes the channel it ran on). */
  async #declareOrCheck(model: amqp.ChannelModel): Promise<void> {
    const { queue, declare, deadLetter } = this.#options;
    const channel = await model.createChannel();
    channel.on('error', () => {});
    const step = async (what: string, work: () => Promise<unknown>) => {
      try {
        await work();
      } catch (error) {
        throw channelError(error, what);
      }
    };
    try {
      if (declare === undefined) {
        await step(`queue "${queue}" on ${this.#broker}`, () => channel.checkQueue(queue));
        if (deadLetter !== undefined)
          await step(`dead-letter exchange "${deadLetter.exchange}" on ${this.#broker}`, () =>
            channel.checkExchange(deadLetter.exchange),
          );
        return;
      }
      const args: Record<string, unknown> = {};
      if (declare.singleActiveConsumer !== false) args['x-single-active-consumer'] = true;
      if (deadLetter !== undefined) {
        args['x-dead-letter-exchange'] = deadLetter.exchange;
        args['x-dead-letter-routing-key'] = deadLetter.routingKey ?? queue;
        const deadQueue = declare.deadLetterQueue ?? `${queue}.dead`;
        await step(`dead-letter exchange "${deadLetter.exchange}"`, () =>
          channel.assertExchange(deadLetter.exchange, 'direct', { durable: true }),
        );
        await step(`dead-letter queue "${deadQueue}"`, () => channel.assertQueue(deadQueue, { durable: true }));
        await step(`binding of "${deadQueue}"`, () =>
          channel.bindQueue(deadQueue, deadLetter.exchange, deadLetter.routingKey ?? queue),
        );
      }
      await step(`queue "${queue}"`, () => channel.assertQueue(queue, { durable: true, arguments: args }));
      for (const binding of declare.bindings ?? []) {
        await step(`exchange "${binding.exchange}"`, () =>
          channel.assertExchange(binding.exchange, binding.type ?? 'topic', { durable: true }),
        );
        await step(`binding of "${queue}" to "${binding.exchange}"`, () =>
          channel.bindQueue(queue, binding.exchange, binding.routingKey),
        );
      }
    } finally {
      await closeQuietly(channel);
    }
  }

  #onMessage(session: Session, raw: amqp.ConsumeMessage | null): void {
    if (session.closed) return; // a late delivery of a dead channel: RabbitMQ requeued it
    if (raw === null) {
      // The broker cancelled the consumer (the queue was deleted): reconnect, which checks the queue again.
      this.#onLost(session, new Error(`RabbitMQ cancelled the consumer of queue "${this.#options.queue}" (deleted?)`));
      return;
    }
    this.#engine.push(this.#hold(session, raw));
  }

  #hold(session: Session, raw: amqp.ConsumeMessage): HeldMessage {
    const { properties, fields } = raw;
    const headers = (properties.headers ?? {}) as Record<string, unknown>;
    const type =
      typeof properties.type === 'string' && properties.type !== ''
        ? properties.type
        : stringHeader(headers[HEADERS.type]);
    const message: InboundMessage = {
      id: typeof properties.messageId === 'string' && properties.messageId !== '' ? properties.messageId : undefined,
      type,
      key: stringHeader(headers[HEADERS.key]) ?? null,
      headers: applicationHeaders(
        headers,
        (name) =>
          name.startsWith('x-death') ||
          name.startsWith('x-first-death') ||
          name.startsWith('x-last-death') ||
          name === 'x-delivery-count',
      ),
      body: raw.content,
      redelivered: fields.redelivered,
      source: `queue ${this.#options.queue}`,
    };
    const live = () => !session.closed;
    return {
      message,
      ack: () => {
        if (live()) session.channel.ack(raw);
      },
      requeue: () => {
        if (live()) session.channel.nack(raw, false, true);
      },
      deadLetter: (reason, detail) => {
        const run = session.deadLetterChain.then(() => this.#deadLetter(session, raw, reason, detail));
        session.deadLetterChain = run.catch(() => {});
        return run;
      },
    };
  }

  async #deadLetter(session: Session, raw: amqp.ConsumeMessage, reason: string, detail: string): Promise<void> {
    if (session.closed) throw new Error('the channel closed before the message was dead-lettered');
    const { deadLetter, queue } = this.#options;
    if (deadLetter === undefined) {
      // The queue's own dead-letter exchange (x-dead-letter-exchange), if it has one; the reason is in the log line.
      session.channel.reject(raw, false);
      return;
    }
    const { channel } = session;
    let returned = false;
    const onReturn = () => {
      returned = true;
    };
    channel.on('return', onReturn);
    try {
      await new Promise<void>((resolve, reject) => {
        channel.publish(
          deadLetter.exchange,
          deadLetter.routingKey ?? queue,
          raw.content,
          {
            ...raw.properties,
            headers: {
              ...(raw.properties.headers ?? {}),
              [HEADERS.deadReason]: reason,
              [HEADERS.deadDetail]: detail,
              [HEADERS.deadSource]: `queue ${queue}`,
            },
            persistent: true,
            mandatory: true,
          },
          (error: unknown) =>
            error ? reject(channelError(error, `dead-letter exchange "${deadLetter.exchange}"`)) : resolve(),
        );
      });
    } finally {
      channel.off('return', onReturn);
    }
    if (returned) {
      // No queue is bound to the dead-letter route: fall back on the queue's own dead-letter exchange rather than keep it for ever.
      this.logger.error(
        `no queue is bound to dead-letter exchange "${deadLetter.exchange}" with routing key "${deadLetter.routingKey ?? queue}"; the message is rejected to the queue's own dead-letter exchange instead`,
        { reason },
      );
      channel.reject(raw, false);
      return;
    }
    channel.ack(raw);
  }

  #onLost(session: Session, error: unknown): void {
    if (session.closed) return;
    session.closed = true;
    void closeQuietly(session.model);
    if (this.state !== 'running') return; // stopping: nothing to reconnect
    this.lastError = describeError(error ?? 'connection closed');
    this.#engine.orphanAll();
    this.#reconnecting ??= this.#reconnect(error).finally(() => {
      this.#reconnecting = undefined;
    });
  }

  /** Reconnect with a capped backoff until it works or the inbox stops. */
  async #reconnect(cause: unknown): Promise<void> {
    // Transactions still running finish first: a redelivered message must not overtake its own commit.
    await this.#engine.waitIdle();
    const backoff = new RetryBackoff(RECONNECT_BACKOFF);
    let error: unknown = cause;
    while (this.state === 'running') {
      const delayMs = backoff.failed();
      this.emitter.emit('disconnected', { broker: this.#broker, error, retryInMs: delayMs });
      this.logger.warn(`lost ${this.name} on ${this.#broker}; reconnecting after a backoff`, {
        attempt: backoff.failures,
        retryInMs: delayMs,
        error: describeError(error ?? 'connection closed'),
      });
      try {
        await sleep(delayMs, undefined, { signal: this.stopped.signal });
      } catch {
        return;
      }
      try {
        await this.#connect(true);
        return;
      } catch (failure) {
        error = failure;
        this.lastError = describeError(failure);
      }
    }
  }
}

function stringHeader(value: unknown): string | undefined {
  if (typeof value === 'string' && value !== '') return value;
  if (Buffer.isBuffer(value) && value.length > 0) return value.toString('utf8');
  return undefined;
}

/**
 * An inbox on a RabbitMQ queue.
 *
 * ```ts
 * const inbox = amqpInbox({ bus, url: process.env.AMQP_URL!, queue: 'orders-b', events: [OrderPlaced],
 *   deadLetter: { exchange: 'orders.dead' }, declare: { bindings: [{ exchange: 'orders', routingKey: 'order.#' }] } });
 * await inbox.start();
 * ```
 */
export function amqpInbox<TTx>(options: AmqpInboxOptions<TTx>): Inbox {
  const where = 'amqpInbox';
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError(`${where}: options are required: { bus, url, queue, events }.`);
  checkAmqpUrl(options.url, where);
  if (typeof options.queue !== 'string' || options.queue === '')
    throw new InvalidOptionsError(`${where}: \`queue\` is required (the queue to consume).`);
  checkInboxBase(where, options, 'queue');
  if (
    options.deadLetter !== undefined &&
    (typeof options.deadLetter.exchange !== 'string' || options.deadLetter.exchange === '')
  ) {
    throw new InvalidOptionsError(`${where}: \`deadLetter.exchange\` must name an exchange.`);
  }
  checkInboxNumbers(where, { prefetch: options.prefetch });
  return new AmqpInbox(options);
}
