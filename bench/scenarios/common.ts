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

export interface RunRecord {
  readonly scenario: 'publish' | 'dispatch' | 'mixed';
  /** The cell: scenario parameters that identify comparable runs (contender excluded). */
  readonly cell: string;
  readonly contender: string;
  readonly variant: string;
  readonly rep: number;
  readonly valid: boolean;
  readonly exactness: Exactness;
  /** The headline figure of the scenario (events/s, deliveries/s, achieved deliveries/s). */
  readonly rate: number;
  readonly figures: Readonly<Record<string, number | null>>;
  readonly db: DbFigures | null;
  readonly profile?: readonly { name: string; count: number; ms: number; msPerCall: number; share: number }[];
  readonly error?: string;
}

export function schemaName(contender: Contender): string {
  return `bench_${contender.name.replace(/-/g, '_')}_${randomBytes(3).toString('hex')}`;
}

/** Set up a schema for `contender`, run `body`, always drop the schema. */
export async function withSchema<T>(context: RunContext, contender: Contender, body: (schema: string) => Promise<T>): Promise<T> {
  const schema = schemaName(contender);
  await contender.setup(context.url, schema);
  try {
    return await body(schema);
  } finally {
    if (process.env.BENCH_KEEP_SCHEMA) context.log(`kept schema ${schema} (BENCH_KEEP_SCHEMA)`);
    else await contender.teardown(context.admin, schema).catch((error: unknown) => context.log(`teardown of ${schema} failed: ${String(error)}`));
  }
}

/** ANALYZE every table of the schema, as autovacuum would after a bulk load (it may be off on the server). */
export async function analyzeSchema(admin: pg.Client, schema: string): Promise<void> {
  const { rows } = await admin.query<{ relname: string }>(
    `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')`, [schema]);
  for (const row of rows) await admin.query(`ANALYZE "${schema}"."${row.relname}"`);
}
