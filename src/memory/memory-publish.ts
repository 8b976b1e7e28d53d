import { randomUUID } from 'node:crypto';
import { EventConflictError } from '../core/errors.js';
import { echo as echoValue } from '../core/limits.js';
import type { PublishParams, PublishResult } from '../store/contract.js';
import { noHandlersError, validatePublish } from '../store/validate.js';
import { jsonEqual, timeOf, type MemoryState, type MemoryTransaction, type TransactionState } from './memory-state.js';

/**
 * Publish on the memory store: the result is computed at once (against committed state plus what the same transaction
 * staged), the writes are staged and applied when the transaction commits (`MemoryState.transaction`).
 */
export class MemoryPublish {
  constructor(readonly data: MemoryState) {}

  // ----- publish -----------------------------------------------------------------------------

  async publish(tx: MemoryTransaction, events: readonly PublishParams[], now?: Date): Promise<PublishResult[]> {
    this.data.assertOpen();
    const payloads = validatePublish(events, now);
    const state = this.data.openTransaction(tx);
    const at = timeOf(now);
    const ids = events.map((event) => event.id ?? randomUUID());
    // The process's handlers, then the subscriptions of the type it does not name (its own registration wins).
    const fanned = events.map((event) => ({ ...event, handlers: this.#fanout(event) }));
    // Every event is checked before any is staged: a conflict (or an event with no handler) stages nothing.
    fanned.forEach((event, i) => {
      if (event.handlers.length === 0) throw noHandlersError(event, i);
    });
    fanned.forEach((event, i) => this.#assertNoConflict(state, ids[i]!, event, payloads[i]!));
    return fanned.map((event, i) => this.#stagePublish(state, ids[i]!, event, payloads[i]!, at));
  }

  #fanout(event: PublishParams): PublishParams['handlers'] {
    const subscribed = this.data.subscriptions.get(event.type);
    if (subscribed === undefined) return event.handlers;
    const named = new Set(event.handlers.map((h) => h.name));
    const added = [...subscribed]
      .filter(([handler]) => !named.has(handler))
      .map(([name, s]) => ({ name, maxAttempts: s.maxAttempts }));
    return [...event.handlers, ...added];
  }

  /** An existing id (committed, or staged by this transaction) must name the same type, key and payload. */
  #assertNoConflict(state: TransactionState, id: string, event: PublishParams, payloadJson: string): void {
    const stored = this.data.events.get(id) ?? state.publishes.find((p) => p.id === id);
    if (!stored) return;
    const key = event.key ?? null;
    const differences = [
      ...(stored.type === event.type ? [] : ['type']),
      ...(stored.key === key ? [] : ['key']),
      ...(jsonEqual(JSON.parse(stored.payloadJson), JSON.parse(payloadJson)) ? [] : ['payload']),
    ];
    if (differences.length === 0) return;
    const parts = differences.map((field) =>
      field === 'type'
        ? `type ${echoValue(stored.type)} was published again as ${echoValue(event.type)}`
        : field === 'key'
          ? `key ${echoValue(stored.key)} was published again as ${echoValue(key)}`
          : 'the payload differs',
    );
    throw new EventConflictError(
      `Event id ${echoValue(id)} is taken by a different event: ${parts.join('; ')}. An event id names one event; ` +
        'publish a different event under a new id. Nothing was written; your transaction is still usable.',
      id,
      differences,
    );
  }

  /** Compute the result against committed state plus this transaction's staging, and stage the new deliveries. */
  #stagePublish(
    state: TransactionState,
    id: string,
    event: PublishParams,
    payloadJson: string,
    now: number,
  ): PublishResult {
    const committed = this.data.events.get(id);
    const staged = state.publishes.filter((p) => p.id === id);
    const known = new Set([...(committed?.handlers ?? []), ...staged.flatMap((p) => p.handlers.map((h) => h.name))]);
    const added = event.handlers
      .filter((h) => !known.has(h.name))
      .map((h) => ({ name: h.name, maxAttempts: h.maxAttempts }));
    if (added.length > 0) {
      state.publishes.push({
        id,
        type: event.type,
        key: event.key ?? null,
        payloadJson,
        headers: { ...(event.headers ?? {}) },
        handlers: added,
        availableAt: event.availableAt?.getTime() ?? now,
        now,
      });
    }
    return {
      eventId: id,
      addedHandlers: added.map((h) => h.name),
      duplicate: committed !== undefined || staged.length > 0,
    };
  }
}
