/**
 * The part of the OpenTelemetry metrics API that relaybus records through, written out structurally
 * so that the library needs no OpenTelemetry package at run time: a `Meter` of `@opentelemetry/api`
 * is one of these, and so is the worker's built-in Prometheus registry (`prometheus.ts`).
 */

/** Attribute values of one data point (Prometheus labels). */
export type MetricAttributes = Readonly<Record<string, string | number | boolean>>;

/** Options of an instrument, as in `@opentelemetry/api`. */
export interface InstrumentOptions {
  readonly description?: string;
  /** UCUM unit: `s` for seconds, `{delivery}` for a count. */
  readonly unit?: string;
  readonly advice?: { readonly explicitBucketBoundaries?: number[] };
}

export interface CounterLike {
  add(value: number, attributes?: MetricAttributes): void;
}

export interface HistogramLike {
  record(value: number, attributes?: MetricAttributes): void;
}

export interface ObservableResultLike {
  observe(value: number, attributes?: MetricAttributes): void;
}

export type ObservableCallbackLike = (result: ObservableResultLike) => void | Promise<void>;

export interface ObservableGaugeLike {
  addCallback(callback: ObservableCallbackLike): void;
  removeCallback(callback: ObservableCallbackLike): void;
}

/** What relaybus needs of a meter: `metrics.getMeter('relaybus')` of `@opentelemetry/api` fits. */
export interface MeterLike {
  createCounter(name: string, options?: InstrumentOptions): CounterLike;
  createHistogram(name: string, options?: InstrumentOptions): HistogramLike;
  createObservableGauge(name: string, options?: InstrumentOptions): ObservableGaugeLike;
}
