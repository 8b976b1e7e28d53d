/**
 * Process signals, in the CLI only (the library never installs signal handlers): the first SIGINT
 * or SIGTERM asks for a graceful stop, the second forces one. Used by `worker` and `demo`.
 */

/** The signals a worker reacts to, with their conventional exit codes (128 + number). */
export const SHUTDOWN_SIGNALS = { SIGINT: 130, SIGTERM: 143 } as const;

/** A shutdown signal name. */
export type ShutdownSignal = keyof typeof SHUTDOWN_SIGNALS;

/** What to do on the first and on the second signal. */
export interface ShutdownHandlers {
  graceful(signal: ShutdownSignal): void;
  force(signal: ShutdownSignal): void;
}

/** The part of `process` this module uses (tests pass an EventEmitter). */
export interface SignalSource {
  on(event: ShutdownSignal, listener: () => void): unknown;
  off(event: ShutdownSignal, listener: () => void): unknown;
}

/**
 * Route SIGINT/SIGTERM: first -> `graceful`, second -> `force`; later signals are ignored (the
 * forced stop has its own deadline). Returns a function that removes the listeners.
 *
 * ```ts
 * const dispose = onShutdownSignals({ graceful: () => bus.stop(), force: () => bus.stop({ graceMs: 0 }) });
 * ```
 */
export function onShutdownSignals(handlers: ShutdownHandlers, source: SignalSource = process): () => void {
  let received = 0;
  const listeners = (Object.keys(SHUTDOWN_SIGNALS) as ShutdownSignal[]).map((signal) => {
    const listener = (): void => {
      received += 1;
      if (received === 1) handlers.graceful(signal);
      else if (received === 2) handlers.force(signal);
    };
    source.on(signal, listener);
    return [signal, listener] as const;
  });
  return () => {
    for (const [signal, listener] of listeners) source.off(signal, listener);
  };
}
