/** What every scenario run shares: a fresh schema per run, dropped afterwards, and a run record. */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { DbFigures } from '../metrics.js';
import type { Contender } from '../lib/types.js';
import type { Exactness } from '../validate.js';

export interface RunContext {
  /** The bench database. */
  readonly url: string;
  /** An autocommit connection of the orchestrator to it. */
  readonly admin: pg.Client;
  readonly walinspect: boolean;
  /** Longest a drain may take before the run is declared INVALID (timeout). */
  readonly timeoutMs: number;
  readonly log: (line: string) => void;
}

/** One contender variant in a cell, with or without ordering keys. */
export interface Entry {
  readonly contender: string;
  readonly variant: string;
  /** Events carry ordering keys (ordered where the contender orders keys). */
  readonly keyed: boolean;
}

export interface RunRecord {
  readonly scenario: 'publish' | 'dispatch' | 'mixed' | 'liveness';
  /** The cell: scenario parameters that identify comparable runs (contender excluded). */
  readonly cell: string;
  readonly contender: string;
  readonly variant: string;
  /** Whether the events carried ordering keys (absent in results written before it existed: keyed). */
  readonly keyed?: boolean;
  /** A sub-case of a cell (liveness: its arm, "failing heads", "healthy keys only", ...). */
  readonly tag?: string;
  readonly rep: number;
  readonly valid: boolean;
  readonly exactness: Exactness;
  /** The headline figure of the scenario (events/s, deliveries/s, achieved deliveries/s). */
  readonly rate: number;
  readonly figures: Readonly<Record<string, number | null>>;
  readonly db: DbFigures | null;
  readonly profile?: readonly { name: string; count: number; ms: number; msPerCall: number; share: number }[];
  /** Warnings and errors the contender's library logged in its dispatcher processes (count, first few). */
  readonly warnings?: { readonly count: number; readonly first: readonly string[] };
  readonly error?: string;
}

/** Merge the warnings of several dispatcher processes. */
export function mergeWarnings(parts: readonly { warnings: readonly string[]; warningCount: number }[]): {
  count: number;
  first: string[];
} {
  return {
    count: parts.reduce((sum, p) => sum + p.warningCount, 0),
    first: parts.flatMap((p) => p.warnings).slice(0, 10),
  };
}

export function schemaName(contender: Contender): string {
  return `bench_${contender.name.replace(/-/g, '_')}_${randomBytes(3).toString('hex')}`;
}

/**
 * The contender whose setup is for the entry's variant (pg-boss 12's partitioned or notifying queues are options of
 * their creation): for the scenarios whose `withSchema` call ends with its body.
 */
export function forVariant(contender: Contender, variant: string): Contender {
  return { ...contender, setup: (url, schema) => contender.setup(url, schema, variant) };
}

/** Set up a schema for `contender` (and the entry's `variant`, where its setup depends on it), run `body`, always drop the schema. */
export async function withSchema<T>(
  context: RunContext,
  contender: Contender,
  body: (schema: string) => Promise<T>,
  variant?: string,
): Promise<T> {
  const schema = schemaName(contender);
  // A checkpoint before every run's setup and preload: the WAL of earlier runs (a preload of 200,000 deliveries writes
  // ~100 MB) otherwise requested checkpoints at random points (max_wal_size), and a run that met one wrote a full-page
  // image at the first change of every page after it: WAL per delivery 67 -> 115-144 B, and server CPU up a fifth, in
  // whichever run it hit. Pages the preload writes after this checkpoint are changed in the run without one.
  await context.admin.query('CHECKPOINT').catch((error: unknown) => context.log(`CHECKPOINT failed: ${String(error)}`));
  await contender.setup(context.url, schema, variant);
  try {
    return await body(schema);
  } finally {
    if (process.env.BENCH_KEEP_SCHEMA) context.log(`kept schema ${schema} (BENCH_KEEP_SCHEMA)`);
    else
      await contender
        .teardown(context.admin, schema)
        .catch((error: unknown) => context.log(`teardown of ${schema} failed: ${String(error)}`));
  }
}

/** ANALYZE every table of the schema, as autovacuum would after a bulk load (it may be off on the server). */
export async function analyzeSchema(admin: pg.Client, schema: string): Promise<void> {
  const { rows } = await admin.query<{ relname: string }>(
    `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')`,
    [schema],
  );
  for (const row of rows) await admin.query(`ANALYZE "${schema}"."${row.relname}"`);
}
