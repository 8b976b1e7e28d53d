/**
 * W3C Trace Context (`traceparent`, `tracestate`) written into and read from event headers, so one
 * trace links a publish to its deliveries even where no global propagator was registered.
 * https://www.w3.org/TR/trace-context/ : `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`.
 */

export const TRACEPARENT = 'traceparent';
export const TRACESTATE = 'tracestate';

/** The parts of a span context that travel. */
export interface TraceParent {
  readonly traceId: string;
  readonly spanId: string;
  readonly traceFlags: number;
  readonly traceState?: string;
}

const PATTERN = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$/;
const INVALID_TRACE = '0'.repeat(32);
const INVALID_SPAN = '0'.repeat(16);

/** The `traceparent` value of `context`. */
export function formatTraceParent(context: Pick<TraceParent, 'traceId' | 'spanId' | 'traceFlags'>): string {
  return `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The trace parent in `headers`, or undefined when there is none or it is malformed. */
export function parseTraceParent(headers: Readonly<Record<string, string>>): TraceParent | undefined {
  const value = headers[TRACEPARENT];
  if (typeof value !== 'string') return undefined;
  const match = PATTERN.exec(value.trim());
  if (!match) return undefined;
  const [, version, traceId, spanId, flags] = match as unknown as [string, string, string, string, string];
  // Version ff is invalid; version 00 has exactly four fields.
  if (version === 'ff' || (version === '00' && value.trim().length !== 55)) return undefined;
  if (traceId === INVALID_TRACE || spanId === INVALID_SPAN) return undefined;
  const state = headers[TRACESTATE];
  return {
    traceId,
    spanId,
    traceFlags: parseInt(flags, 16),
    ...(typeof state === 'string' && state !== '' ? { traceState: state } : {}),
  };
}
