import { TypedEmitter, type TypedEvents } from '../core/emitter.js';
import { InvalidOptionsError } from '../core/errors.js';
import { describeError, type Logger } from '../core/logger.js';
import { inboxLogger } from './inbox-logger.js';
import type { Inbox, InboxEventMap, InboxStopOptions } from './inbox-types.js';

/** Where an inbox is in its life. */
export type InboxState = 'idle' | 'starting' | 'running' | 'stopping' | 'stopped';

/**
 * The start / stop / health state machine every inbox shares: start once (back to idle, with the
 * error remembered, when it fails), stop idempotently, ready while running and connected. A broker's
 * inbox sets up its store, connects and consumes in `open()` (which sets `state` to 'running' when it
 * begins consuming), and lets held messages finish and closes in `close()`. The logger and the lifecycle
 * emitter are kept here too, one of each per inbox.
 */
export abstract class InboxLifecycle implements Inbox {
  abstract readonly name: string;
  protected readonly logger: Logger;
  protected readonly emitter: TypedEmitter<InboxEventMap>;
  protected state: InboxState = 'idle';
  protected lastError: string | undefined;
  /** Aborted by `stop()`: ends reconnect waits at once. */
  protected readonly stopped = new AbortController();
  #stopping: Promise<void> | undefined;

  constructor(logger: Logger | undefined) {
    this.logger = inboxLogger(this, logger); // relaybus inbox lends its logger when none was given
    this.emitter = new TypedEmitter<InboxEventMap>(() => this.logger);
  }

  get lifecycle(): TypedEvents<InboxEventMap> {
    return this.emitter;
  }

  /** Connected now (a channel, a connection that is up). */
  protected abstract isConnected(): boolean;
  /** Set up the store, connect, check or declare, consume; sets `state` to 'running' once consuming. */
  protected abstract open(): Promise<void>;
  /** Stop consuming, let held messages finish within the grace period, give the rest back, close. */
  protected abstract close(options: InboxStopOptions): Promise<void>;

  health(): { ready: boolean; lastError?: string } {
    const ready = this.state === 'running' && this.isConnected();
    return ready || this.lastError === undefined ? { ready } : { ready, lastError: this.lastError };
  }

  async start(): Promise<void> {
    if (this.state !== 'idle')
      throw new InvalidOptionsError(`${this.name}: start() was called on a ${this.state} inbox; an inbox starts once.`);
    this.state = 'starting';
    try {
      await this.open();
    } catch (error) {
      this.state = 'idle';
      this.lastError = describeError(error);
      throw error;
    }
  }

  stop(options: InboxStopOptions = {}): Promise<void> {
    if (this.#stopping !== undefined) return this.#stopping;
    if (this.state === 'idle' || this.state === 'stopped') {
      this.state = 'stopped';
      return Promise.resolve();
    }
    this.state = 'stopping';
    this.stopped.abort();
    this.#stopping = (async () => {
      await this.close(options);
      this.state = 'stopped';
    })();
    return this.#stopping;
  }
}
