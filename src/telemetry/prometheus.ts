import type {
  CounterLike,
  HistogramLike,
  InstrumentOptions,
  MeterLike,
  MetricAttributes,
  ObservableCallbackLike,
  ObservableGaugeLike,
} from './meter.js';

/**
 * A small in-process metrics registry with the `MeterLike` surface, rendered in the Prometheus text
 * exposition format (0.0.4). The worker's `/metrics` uses it, so `relaybus worker --metrics-port`
 * needs no OpenTelemetry SDK or exporter installed. Names: dots become underscores, a unit of `s`
 * adds `_seconds`, counters end in `_total` (as the OpenTelemetry Prometheus exporter does).
 */

/** The `Content-Type` of `render()`'s output. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const DEFAULT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

type Kind = 'counter' | 'histogram' | 'gauge';

interface HistogramPoint {
  readonly counts: number[];
  sum: number;
  count: number;
}

interface Family {
  readonly name: string;
  readonly kind: Kind;
  readonly help: string;
  readonly buckets: readonly number[];
  readonly labels: Map<string, MetricAttributes>;
  readonly values: Map<string, number | HistogramPoint>;
  readonly callbacks: Set<ObservableCallbackLike>;
}

/** The Prometheus name of an OpenTelemetry instrument. */
export function prometheusName(name: string, kind: Kind, unit: string | undefined): string {
  let base = name.replace(/[^a-zA-Z0-9_:]/g, '_');
  if (/^[0-9]/.test(base)) base = `_${base}`;
  if (unit === 's' && !base.endsWith('_seconds')) base += '_seconds';
  if (kind === 'counter' && !base.endsWith('_total')) base += '_total';
  return base;
}

function labelName(name: string): string {
  const clean = name.replace(/[^a-zA-Z0-9_]/g, '_');
  return /^[0-9]/.test(clean) ? `_${clean}` : clean;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function escapeHelp(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function keyOf(attributes: MetricAttributes | undefined): string {
  if (attributes === undefined) return '';
  const names = Object.keys(attributes);
  if (names.length === 0) return '';
  return JSON.stringify(names.sort().map((name) => [name, String(attributes[name])]));
}

function renderLabels(attributes: MetricAttributes | undefined, extra?: readonly [string, string]): string {
  const parts = Object.keys(attributes ?? {})
    .sort()
    .map((name) => `${labelName(name)}="${escapeLabel(String(attributes![name]))}"`);
  if (extra !== undefined) parts.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return String(value);
}

/** An in-process registry of counters, histograms and observable gauges. */
export class PrometheusRegistry implements MeterLike {
  readonly #families = new Map<string, Family>();

  #family(name: string, kind: Kind, options: InstrumentOptions | undefined): Family {
    const promName = prometheusName(name, kind, options?.unit);
    const existing = this.#families.get(promName);
    if (existing !== undefined) {
      if (existing.kind !== kind) throw new TypeError(`metric ${promName} exists already as a ${existing.kind}`);
      return existing;
    }
    const family: Family = {
      name: promName,
      kind,
      help: options?.description ?? name,
      buckets: [...(options?.advice?.explicitBucketBoundaries ?? DEFAULT_BUCKETS)].sort((a, b) => a - b),
      labels: new Map(),
      values: new Map(),
      callbacks: new Set(),
    };
    this.#families.set(promName, family);
    return family;
  }

  createCounter(name: string, options?: InstrumentOptions): CounterLike {
    const family = this.#family(name, 'counter', options);
    return {
      add(value, attributes) {
        if (!(value >= 0)) return; // a counter only grows; OpenTelemetry drops negative adds too
        const key = keyOf(attributes);
        if (!family.labels.has(key)) family.labels.set(key, { ...attributes });
        family.values.set(key, ((family.values.get(key) as number | undefined) ?? 0) + value);
      },
    };
  }

  createHistogram(name: string, options?: InstrumentOptions): HistogramLike {
    const family = this.#family(name, 'histogram', options);
    return {
      record(value, attributes) {
        if (!Number.isFinite(value)) return;
        const key = keyOf(attributes);
        let point = family.values.get(key) as HistogramPoint | undefined;
        if (point === undefined) {
          point = { counts: new Array<number>(family.buckets.length).fill(0), sum: 0, count: 0 };
          family.values.set(key, point);
          family.labels.set(key, { ...attributes });
        }
        const bucket = family.buckets.findIndex((bound) => value <= bound);
        if (bucket >= 0) point.counts[bucket]! += 1;
        point.sum += value;
        point.count += 1;
      },
    };
  }

  createObservableGauge(name: string, options?: InstrumentOptions): ObservableGaugeLike {
    const family = this.#family(name, 'gauge', options);
    return {
      addCallback: (callback) => void family.callbacks.add(callback),
      removeCallback: (callback) => void family.callbacks.delete(callback),
    };
  }

  /** The current values in the Prometheus text format; observable gauges are read now. */
  async render(): Promise<string> {
    const lines: string[] = [];
    for (const family of this.#families.values()) {
      const points =
        family.kind === 'gauge'
          ? await this.#observe(family)
          : [...family.values].map(([key, value]) => [family.labels.get(key), value] as const);
      if (points.length === 0) continue;
      lines.push(`# HELP ${family.name} ${escapeHelp(family.help)}`, `# TYPE ${family.name} ${family.kind}`);
      for (const [labels, value] of points) {
        if (typeof value === 'number') {
          lines.push(`${family.name}${renderLabels(labels)} ${formatNumber(value)}`);
          continue;
        }
        const base = family.name;
        let cumulative = 0;
        family.buckets.forEach((bound, i) => {
          cumulative += value.counts[i]!;
          lines.push(`${base}_bucket${renderLabels(labels, ['le', formatNumber(bound)])} ${cumulative}`);
        });
        lines.push(`${base}_bucket${renderLabels(labels, ['le', '+Inf'])} ${value.count}`);
        lines.push(`${base}_sum${renderLabels(labels)} ${formatNumber(value.sum)}`);
        lines.push(`${base}_count${renderLabels(labels)} ${value.count}`);
      }
    }
    return lines.join('\n') + '\n';
  }

  async #observe(family: Family): Promise<(readonly [MetricAttributes | undefined, number])[]> {
    const observed = new Map<string, readonly [MetricAttributes | undefined, number]>();
    const result = {
      observe(value: number, attributes?: MetricAttributes) {
        if (typeof value === 'number') observed.set(keyOf(attributes), [attributes, value]);
      },
    };
    await Promise.all(
      [...family.callbacks].map(async (callback) => {
        try {
          await callback(result);
        } catch {
          // one failing callback does not hide the others
        }
      }),
    );
    return [...observed.values()];
  }
}
