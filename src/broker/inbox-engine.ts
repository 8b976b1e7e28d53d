import { setTimeout as sleep } from 'node:timers/promises';
import type { EventDefinition } from '../core/events.js';
import { EventConflictError } from '../core/errors.js';
import type { TypedEmitter } from '../core/emitter.js';
import { describeError, type Logger } from '../core/logger.js';
import type { PublishOptions } from '../bus/bus-api.js';
import { RetryBackoff } from '../core/retry-backoff.js';
import type { PublishResult, Store } from '../store/contract.js';
import { deadLetterReasonOf, truncate, type DeadLetterReason } from './dead-letter.js';
import { InboxRejection, type InboundMessage, type InboxMapper } from './broker-message.js';
import type { InboxEventMap } from './inbox-types.js';

/**
 * The broker-neutral heart of an inbox: messages in, events out, in the order that keeps each key's
 * order. For each batch of messages it runs ONE store transaction that publishes their events (the
 * message id is the event id), commits, and only then acknowledges them. A crash between the commit
 * and the acks makes the broker redeliver; publishing the same id again is a duplicate that adds no
 * delivery for a handler the event already had (`events.handlers`), so redelivery is harmless.
 *
 * Order: messages are taken in arrival order. A batch never holds a key (or an id) that another
 * running batch holds, and once a key is skipped every later message of that key waits too, so one
 * key's events are published in arrival order. A batch that fails on the store is retried in place
 * (held, not requeued): requeueing would let the key's next message overtake it.
 *
 * Poison messages (no id, a body the mapper rejects, a payload that breaks its schema, an id taken
 * by a different event) go to the adapter's dead-letter route with the reason; a store failure never
 * dead-letters, it retries with a capped backoff until the store answers or the inbox stops.
 */

/** A message the adapter holds until the inbox settles it, exactly once, with one of these calls. */
export interface HeldMessage {
  readonly message: InboundMessage;
  /** The event is committed: acknowledge. */
  ack(): void | Promise<void>;
  /** Poison: send to the dead-letter route with the reason, then remove it from the queue. */
  deadLetter(reason: DeadLetterReason, detail: string): Promise<void>;
  /** Not handled (the inbox is stopping): give it back to the broker for a later delivery. */
  requeue(): void | Promise<void>;
  /** Tell the broker the message is still being worked on (JetStream: resets the ack wait). */
  working?(): void;
}

/** The bus as the inbox uses it: its store's transactions and `publishMany`. */
export interface InboxBus<TTx> {
  readonly store: Pick<Store<TTx>, 'transaction' | 'setup'>;
  publishMany(
    tx: TTx,
    items: readonly { readonly event: EventDefinition; readonly payload: unknown; readonly options?: PublishOptions }[],
  ): Promise<PublishResult[]>;
}

export interface InboxEngineOptions<TTx> {
  readonly bus: InboxBus<TTx>;
  readonly map: InboxMapper;
  /** Most messages per transaction. */
  readonly batchSize: number;
  /** Transactions at once. */
  readonly concurrency: number;
  readonly logger: Logger;
  readonly emitter: TypedEmitter<InboxEventMap>;
  /** Delays between retries of a batch the store failed. */
  readonly retry?: RetryBackoff;
  /** How often `working()` is called on every held message (when the adapter has it). */
  readonly workingIntervalMs?: number;
}

interface Entry {
  readonly held: HeldMessage;
  readonly id: string;
  readonly key: string | null;
  readonly event: EventDefinition;
  readonly payload: unknown;
  readonly headers: Readonly<Record<string, string>>;
  /** The adapter lost the connection the message came on: whatever happens, it is redelivered. */
  orphaned: boolean;
  /** Settled (acked, dead-lettered, requeued): nothing more to do. */
  settled: boolean;
}

export class InboxEngine<TTx> {
  readonly #options: InboxEngineOptions<TTx>;
  /** Mapped messages not yet in a batch, in arrival order. */
  #queue: Entry[] = [];
  /** Entries of running batches. */
  readonly #running = new Set<Entry>();
  readonly #busyKeys = new Map<string, number>();
  readonly #busyIds = new Set<string>();
  #batches = 0;
  /** Dead-letter and other settlements in progress. */
  readonly #pendingSettlements = new Set<Promise<void>>();
  readonly #idleWaiters: (() => void)[] = [];
  /** Aborted when a stop's grace period is over: retry waits end, unhandled messages are requeued. */
  #abort = new AbortController();
  #accepting = true;
  #pumpScheduled = false;
  #working: NodeJS.Timeout | undefined;

  constructor(options: InboxEngineOptions<TTx>) {
    this.#options = options;
    if (options.workingIntervalMs !== undefined) {
      this.#working = setInterval(() => this.#heartbeat(), options.workingIntervalMs);
      this.#working.unref();
    }
  }

  /** Messages held: queued, in a batch, or being dead-lettered (a scheduled pump counts: its queue may be empty already). */
  get held(): number {
    return this.#queue.length + this.#running.size + this.#pendingSettlements.size + (this.#pumpScheduled ? 1 : 0);
  }

  /** Take a message: map it (a rejection is dead-lettered at once) and schedule it. */
  push(held: HeldMessage): void {
    if (!this.#accepting) {
      this.#settle(async () => held.requeue());
      return;
    }
    const { message } = held;
    let entry: Entry;
    try {
      const mapped = this.#options.map(message);
      const id = mapped.id ?? message.id;
      if (id === undefined || id === '')
        throw new InboxRejection(
          'missing-id',
          'the message has no id (AMQP messageId, JetStream Nats-Msg-Id): a redelivery could not be told from a new message',
        );
      const issues = mapped.event.check(mapped.payload);
      if (issues.length > 0) {
        throw new InboxRejection(
          'invalid-payload',
          `the payload breaks the schema of "${mapped.event.type}": ${issues
            .slice(0, 5)
            .map((i) => `${i.path}: ${i.message}`)
            .join('; ')}`,
        );
      }
      entry = {
        held,
        id,
        key: mapped.key !== undefined ? mapped.key : message.key,
        event: mapped.event,
        payload: mapped.payload,
        headers: mapped.headers ?? message.headers,
        orphaned: false,
        settled: false,
      };
    } catch (error) {
      const reason: DeadLetterReason = error instanceof InboxRejection ? error.reason : 'malformed';
      this.#deadLetter(held, reason, error instanceof Error ? error.message : String(error));
      return;
    }
    this.#queue.push(entry);
    // Deliveries that arrive in one network read are batched together: pump once they are all queued.
    if (!this.#pumpScheduled) {
      this.#pumpScheduled = true;
      setImmediate(() => {
        this.#pumpScheduled = false;
        this.#pump();
        this.#checkIdle();
      });
    }
  }

  /** The connection the held messages came on is gone: the broker redelivers them, so drop the queued ones and stop retrying the rest. */
  orphanAll(): void {
    for (const entry of this.#queue) {
      entry.orphaned = true;
      entry.settled = true;
    }
    this.#queue = [];
    for (const entry of this.#running) entry.orphaned = true;
    this.#checkIdle();
  }

  /** Resolve once nothing is held (queued, running or settling). */
  waitIdle(): Promise<void> {
    if (this.held === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /**
   * Stop taking messages and let the held ones finish within `graceMs`; then requeue what was not
   * handled (a transaction already running is waited for: its commit is quick and its ack follows).
   */
  async drain(graceMs: number): Promise<void> {
    this.#accepting = false;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.waitIdle(), new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
    if (this.held > 0) {
      this.#abort.abort();
      const queued = this.#queue;
      this.#queue = [];
      for (const entry of queued) this.#requeue(entry);
      await this.waitIdle();
    }
    clearInterval(this.#working);
  }

  /** Take messages again after a drain (a restarted inbox). */
  resume(): void {
    this.#accepting = true;
    this.#abort = new AbortController();
    if (this.#options.workingIntervalMs !== undefined && this.#working === undefined) {
      this.#working = setInterval(() => this.#heartbeat(), this.#options.workingIntervalMs);
      this.#working.unref();
    }
  }

  #pump(): void {
    const { batchSize, concurrency } = this.#options;
    while (this.#batches < concurrency && this.#queue.length > 0) {
      const batch: Entry[] = [];
      const blocked = new Set<string>();
      const ids = new Set<string>();
      const rest: Entry[] = [];
      for (const entry of this.#queue) {
        const keyBusy = entry.key !== null && (blocked.has(entry.key) || this.#busyKeys.has(entry.key));
        const idBusy = ids.has(entry.id) || this.#busyIds.has(entry.id);
        if (batch.length >= batchSize || keyBusy || idBusy) {
          // Everything later of this key waits behind this one.
          if (entry.key !== null) blocked.add(entry.key);
          rest.push(entry);
          continue;
        }
        batch.push(entry);
        ids.add(entry.id);
      }
      if (batch.length === 0) return;
      this.#queue = rest;
      this.#startBatch(batch);
    }
  }

  #startBatch(batch: Entry[]): void {
    this.#batches += 1;
    for (const entry of batch) {
      this.#running.add(entry);
      this.#busyIds.add(entry.id);
      if (entry.key !== null) this.#busyKeys.set(entry.key, (this.#busyKeys.get(entry.key) ?? 0) + 1);
    }
    void this.#publish(batch)
      .catch((error: unknown) =>
        this.#options.logger.error('inbox batch failed unexpectedly; its messages are redelivered', {
          error: describeError(error),
        }),
      )
      .finally(() => {
        this.#batches -= 1;
        for (const entry of batch) {
          this.#running.delete(entry);
          this.#busyIds.delete(entry.id);
          if (entry.key !== null) {
            const left = (this.#busyKeys.get(entry.key) ?? 1) - 1;
            if (left === 0) this.#busyKeys.delete(entry.key);
            else this.#busyKeys.set(entry.key, left);
          }
        }
        this.#pump();
        this.#checkIdle();
      });
  }

  /** One transaction for `batch`, then the acks; retried in place while the store fails. */
  async #publish(batch: readonly Entry[]): Promise<void> {
    let items = batch.filter((entry) => !entry.settled);
    const backoff = this.#options.retry ?? new RetryBackoff();
    while (items.length > 0) {
      if (items.every((entry) => entry.orphaned)) return; // redelivered on the next connection
      if (this.#abort.signal.aborted) {
        for (const entry of items) this.#requeue(entry);
        return;
      }
      let results: PublishResult[];
      try {
        results = await this.#options.bus.store.transaction((tx) =>
          this.#options.bus.publishMany(
            tx,
            items.map((entry) => ({
              event: entry.event,
              payload: entry.payload,
              options: {
                id: entry.id,
                key: entry.key,
                ...(Object.keys(entry.headers).length > 0 ? { headers: entry.headers } : {}),
              },
            })),
          ),
        );
      } catch (error) {
        const reason = deadLetterReasonOf(error);
        if (reason !== undefined) {
          // The message's fault: dead-letter it alone; the others go on (one by one when the culprit is unknown).
          const culprit =
            error instanceof EventConflictError
              ? items.find((entry) => entry.id === error.eventId)
              : items.length === 1
                ? items[0]
                : undefined;
          if (culprit !== undefined) {
            await this.#deadLetterEntry(culprit, reason, error instanceof Error ? error.message : String(error));
            items = items.filter((entry) => entry !== culprit);
            continue;
          }
          for (const entry of items) await this.#publish([entry]);
          return;
        }
        const delayMs = backoff.failed();
        this.#options.emitter.emit('retrying', { error, delayMs, attempt: backoff.failures, messages: items.length });
        this.#options.logger.warn(
          'the store failed; the inbox retries the batch in place after a backoff (its messages stay unacknowledged)',
          {
            attempt: backoff.failures,
            retryInMs: delayMs,
            messages: items.length,
            error: describeError(error),
          },
        );
        try {
          await sleep(delayMs, undefined, { signal: this.#abort.signal });
        } catch {
          // the stop's grace period is over: requeued at the top of the loop
        }
        continue;
      }
      if (backoff.failures > 0)
        this.#options.logger.info('the store answers again; the batch is published', {
          failedAttempts: backoff.succeeded(),
        });
      this.#options.emitter.emit('committed', {
        messages: items.map((entry, i) => ({
          id: entry.id,
          key: entry.key,
          type: entry.event.type,
          source: entry.held.message.source,
          duplicate: results[i]?.duplicate ?? false,
          addedHandlers: results[i]?.addedHandlers ?? [],
        })),
      });
      for (const entry of items) {
        entry.settled = true;
        if (entry.orphaned) continue; // its channel is gone: a redelivery finds the event and is acked then
        try {
          await entry.held.ack();
        } catch (error) {
          this.#options.logger.debug('ack failed after commit; the broker redelivers and the inbox deduplicates', {
            id: entry.id,
            error: describeError(error),
          });
        }
      }
      return;
    }
  }

  #deadLetterEntry(entry: Entry, reason: DeadLetterReason, detail: string): Promise<void> {
    entry.settled = true;
    if (entry.orphaned) return Promise.resolve();
    return this.#deadLetterNow(entry.held, reason, detail);
  }

  #deadLetter(held: HeldMessage, reason: DeadLetterReason, detail: string): void {
    this.#settle(() => this.#deadLetterNow(held, reason, detail));
  }

  async #deadLetterNow(held: HeldMessage, reason: DeadLetterReason, detail: string): Promise<void> {
    const text = truncate(detail);
    this.#options.logger.error(`dead-lettered a message from ${held.message.source}: ${reason}`, {
      id: held.message.id,
      reason,
      detail: text,
    });
    try {
      await held.deadLetter(reason, text);
      this.#options.emitter.emit('dead-lettered', { message: held.message, reason, detail: text });
    } catch (error) {
      // Not acknowledged: the broker redelivers it and it is judged again.
      this.#options.logger.warn('could not dead-letter a message; the broker redelivers it', {
        id: held.message.id,
        error: describeError(error),
      });
    }
  }

  #requeue(entry: Entry): void {
    if (entry.settled) return;
    entry.settled = true;
    if (entry.orphaned) return;
    this.#settle(async () => entry.held.requeue());
  }

  #settle(work: () => Promise<void>): void {
    const promise = work()
      .catch((error: unknown) =>
        this.#options.logger.debug('settling a message failed; the broker redelivers it', {
          error: describeError(error),
        }),
      )
      .finally(() => {
        this.#pendingSettlements.delete(promise);
        this.#checkIdle();
      });
    this.#pendingSettlements.add(promise);
  }

  #heartbeat(): void {
    for (const entry of [...this.#queue, ...this.#running]) {
      if (!entry.settled && !entry.orphaned) entry.held.working?.();
    }
  }

  #checkIdle(): void {
    if (this.held > 0) return;
    for (const resolve of this.#idleWaiters.splice(0)) resolve();
  }
}
