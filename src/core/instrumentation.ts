import type { PublishParams, PublishResult } from './publish-params.js';
import type { DeliveryInfo } from './handlers.js';

/**
 * The one hook set through which tracing (and publish metrics) reach the core: the `instrumentation`
 * option of `createRelayBus`. Absent (the default), the bus and the dispatcher call straight through
 * and allocate nothing for it. `openTelemetry()` from `relaybus/opentelemetry` implements it; any
 * other tracer can too.
 */

/** The delivery whose handler is about to run, and the lane it was claimed in. */
export interface HandlerRunInfo {
  readonly delivery: DeliveryInfo;
  readonly lane: number;
}

/** Hooks around publishing and around each handler call; every hook is optional. */
export interface Instrumentation {
  /**
   * Wraps the store write of one `bus.publish` or `bus.publishMany` call. Call `write` exactly once,
   * with `events` or a copy that adds headers (a trace context), and return (or pass through) its
   * result; an error of `write` must reach the caller unchanged.
   */
  publish?(
    events: readonly PublishParams[],
    write: (events: readonly PublishParams[]) => Promise<PublishResult[]>,
  ): Promise<PublishResult[]>;
  /**
   * Wraps one handler call: call `call` exactly once and return what it returns (a value or a
   * promise), rethrowing what it throws. Runs the handler inside whatever context the hook sets up.
   */
  runHandler?(run: HandlerRunInfo, call: () => unknown): unknown;
}
