import type { TypedEvents } from '../core/emitter.js';
import type { DeadLetterReason } from './dead-letter.js';
import type { InboundMessage } from './broker-message.js';

/** One message whose event was committed (sent with `committed`, before the acks). */
export interface CommittedMessage {
  readonly id: string;
  readonly key: string | null;
  readonly type: string;
  readonly source: string;
  /** True when the event existed already (a redelivery, or the relay sent it twice). */
  readonly duplicate: boolean;
  /** Handlers that got a delivery now: empty for a duplicate whose handlers it had. */
  readonly addedHandlers: readonly string[];
}

/** Lifecycle events of an inbox, for logs and metrics. */
export interface InboxEventMap {
  /** A batch's transaction committed; its acks follow. */
  readonly committed: { readonly messages: readonly CommittedMessage[] };
  /** A poison message went to the dead-letter route. */
  readonly 'dead-lettered': {
    readonly message: InboundMessage;
    readonly reason: DeadLetterReason;
    readonly detail: string;
  };
  /** The store failed a batch; it is retried in place after `delayMs`. */
  readonly retrying: {
    readonly error: unknown;
    readonly delayMs: number;
    readonly attempt: number;
    readonly messages: number;
  };
  /** Consuming (again). */
  readonly connected: { readonly broker: string; readonly reconnect: boolean };
  /**
   * (JetStream) `outstanding` messages delivered earlier are unacknowledged and not this inbox's: it
   * holds what it receives until they come back, then handles all in stream order (per-key order).
   */
  readonly 'held-back': { readonly outstanding: number; readonly ackWaitMs: number };
  /** The connection dropped; the inbox reconnects after `retryInMs`. */
  readonly disconnected: { readonly broker: string; readonly error: unknown; readonly retryInMs: number };
}

/** Options of `inbox.stop()`. */
export interface InboxStopOptions {
  /** How long held messages may take to finish before the rest are requeued. Default: the inbox's `shutdownGraceMs`. */
  readonly graceMs?: number;
}

/** A running inbox: consumes a queue or a durable consumer into the bus's store. */
export interface Inbox {
  /** For logs: `amqp queue orders-b`, `nats ORDERS/orders-b`. */
  readonly name: string;
  readonly lifecycle: TypedEvents<InboxEventMap>;
  /**
   * Connect, check that the queue (or stream and consumer) exists, and consume. Rejects with
   * `BrokerUnavailableError` (the broker named) when it cannot connect, `BrokerNotFoundError` when the
   * queue, stream or consumer does not exist. After the start, a lost connection is retried for ever.
   */
  start(): Promise<void>;
  /** Stop consuming, let held messages finish within the grace period, requeue the rest, close. Idempotent. */
  stop(options?: InboxStopOptions): Promise<void>;
  /** `ready` while consuming; `lastError` says why not. */
  health(): { readonly ready: boolean; readonly lastError?: string };
}
