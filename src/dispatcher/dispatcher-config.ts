import type { Clock } from '../core/clock.js';
import type { TypedEmitter } from '../core/emitter.js';
import type { RelayBusEventMap, ResolvedHandler } from '../core/handlers.js';
import type { Logger } from '../core/logger.js';
import type { ResolvedDispatcherOptions } from '../core/options.js';
import type { Store } from '../store/contract.js';
import type { HealthState } from './health.js';
import type { RetryBackoff } from '../core/retry-backoff.js';

/** What a dispatcher is built from, its states and the options of its `stop()` (dispatcher.ts). */

/** Lifecycle state of a dispatcher; see the module header. */
export type DispatcherState = 'idle' | 'running' | 'stopping' | 'stopped';

/** Everything a dispatcher needs; the bus builds it. */
export interface DispatcherConfig<TTx> {
  readonly store: Store<TTx>;
  /** Handlers by name; the dispatcher claims deliveries of these handlers only. */
  readonly handlers: ReadonlyMap<string, ResolvedHandler<TTx>>;
  readonly options: ResolvedDispatcherOptions;
  readonly logger: Logger;
  /** Undefined: store calls use the store's clock. */
  readonly clock: Clock | undefined;
  readonly emitter: TypedEmitter<RelayBusEventMap>;
  /** Random source of the backoff jitter (tests). */
  readonly random?: () => number;
  /** Where the claim loop reports whether the store answers; a private one when absent. */
  readonly health?: HealthState;
  /** Delays between retries of a failing claim; `STORE_RETRY_BACKOFF` when absent (tests shorten it). */
  readonly claimBackoff?: RetryBackoff;
}

/** Options of `stop()`. */
export interface StopOptions {
  /** Override `shutdownGraceMs` for this stop; while a stop is in progress, cuts its grace period to this. */
  readonly graceMs?: number;
}
