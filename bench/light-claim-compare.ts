/**
 * The light claim's round trip (sql/hot-path/claim-light.sql), as a worker under a light load makes it: a publish woke
 * it and named a free lane, which holds the event's two deliveries. The working tree's statement against `--text
 * <file>` (a copy with a part cut out or changed, rendered as the store renders its statements), in turns, each call in
 * a transaction rolled back (the state stays as it was), on one connection with the settings a claim session's
 * connection has (`LENT_SESSION_SETTINGS`: a generic plan from the first call, random_page_cost at most 1.1). Prints
 * each side's round trip (p10, p50, p90, ms) and the median of the paired ratios (text / working tree; identical texts
 * read 0.99-1.00).
 *
 *   npm run bench:light-claim-compare -- [--text <file>] [--runs 1500] [--held]
 *
 * `--held`: the lane is already the worker's (in the claim's held lanes) rather than named by the wake-up. A file
 * that takes the same eight parameters and claims nothing (a SELECT of its parameters) measures the round trip's
 * floor: what the client, the protocol and an empty statement cost.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { LENT_SESSION_SETTINGS } from '../src/postgres/drivers/pg-driver.js';
import { fromPg, postgresStore } from '../src/postgres/index.js';
import { loadStatements, renderStatement } from '../src/postgres/statements.js';
import { createBenchDatabase, dropBenchDatabase } from './lib/db.js';
import { HANDLERS } from './lib/types.js';

const { values: args } = parseArgs({
  options: {
    text: { type: 'string' },
    runs: { type: 'string', default: '1500' },
    held: { type: 'boolean', default: false },
  },
});
const runs = Number(args.runs);
if (!Number.isInteger(runs) || runs < 100) throw new Error('--runs must be an integer of at least 100');
/** The first calls of each side are not counted: the plan is made and the caches warm. */
const WARM_RUNS = 50;
const schema = 'bench_light_claim_compare';
const owner = 'light-claim-compare';

const { url, created } = await createBenchDatabase('relaybus_bench_light_claim');
const pool = new pg.Pool({ connectionString: url, max: 2 });
try {
  const store = postgresStore({ driver: fromPg(pool), schema });
  await store.setup();
  const handlers = HANDLERS.map((name) => ({ name, maxAttempts: 5 }));
  // The heap of a light load: a few pages that earlier deliveries left, then the one event the wake-up announced.
  await store.transaction((tx) =>
    store.publish(
      tx,
      Array.from({ length: 20 }, (_, k) => ({ type: 't', key: `earlier-${k}`, payload: { k }, handlers })),
    ),
  );
  await pool.query(`DELETE FROM "${schema}".relaybus_deliveries`);
  await store.transaction((tx) => store.publish(tx, [{ type: 't', key: 'announced', payload: { a: 1 }, handlers }]));
  await pool.query(`ANALYZE "${schema}".relaybus_deliveries`);
  const {
    rows: [{ lane } = { lane: -1 }],
  } = await pool.query<{ lane: number }>(`SELECT lane FROM "${schema}".relaybus_deliveries LIMIT 1`);
  if (args.held)
    await pool.query(
      `UPDATE "${schema}".relaybus_lanes SET lease_owner = $1, lease_expires_at = now() + interval '1 hour' WHERE lane = $2`,
      [owner, lane],
    );
  // $1-$8 of claim-light as a claim session sends them (LIGHT_ROWS_PER_LANE 256): the lane named, or held.
  const params = [owner, HANDLERS, 50, 60_000, null, 256, args.held ? [] : [lane], args.held ? [lane] : []];
  const texts = new Map<string, string>([['working tree', loadStatements(schema)['claim-light'].text]]);
  texts.set(
    args.text ?? 'working tree (again)',
    args.text ? renderStatement(readFileSync(args.text, 'utf8'), schema) : texts.get('working tree')!,
  );
  const sides = [...texts.keys()];
  const times = new Map<string, number[]>(sides.map((side) => [side, []]));

  const client = await pool.connect();
  try {
    await client.query(LENT_SESSION_SETTINGS);
    let claimed: Record<string, string | null> = {};
    for (let run = 0; run < runs + WARM_RUNS; run += 1)
      for (const [index, side] of sides.entries()) {
        await client.query('BEGIN');
        const started = performance.now();
        const { rows } = await client.query<{ claimed?: string | null }>({
          name: `light_claim_compare_${index}`,
          text: texts.get(side)!,
          values: params,
        });
        const took = performance.now() - started;
        await client.query('ROLLBACK');
        if (run >= WARM_RUNS) times.get(side)!.push(took);
        if (run === 0) claimed = { ...claimed, [side]: rows[0]?.claimed ?? null };
      }
    const picked = (text: string | null | undefined) => (text ? (JSON.parse(text) as unknown[]).length : 0);
    console.log(
      `claim-light in a light state: one event's 2 deliveries in lane ${lane} (${args.held ? 'held by the worker' : 'named by the wake-up'}); first calls claimed ${sides.map((side) => `${picked(claimed[side])} (${side})`).join(', ')}`,
    );
  } finally {
    client.release();
  }

  const quantile = (values: readonly number[], q: number) =>
    [...values].sort((a, b) => a - b)[Math.floor(q * (values.length - 1))]!;
  for (const side of sides) {
    const taken = times.get(side)!;
    console.log(
      `${side.padEnd(28)} round trip ms: p10 ${quantile(taken, 0.1).toFixed(3)}  p50 ${quantile(taken, 0.5).toFixed(3)}  p90 ${quantile(taken, 0.9).toFixed(3)}`,
    );
  }
  const [base, other] = sides.map((side) => times.get(side)!);
  const ratios = base!.map((took, index) => other![index]! / took);
  console.log(
    `${sides[1]} / ${sides[0]}, median of ${ratios.length} paired ratios: ${quantile(ratios, 0.5).toFixed(3)} (quartiles ${quantile(ratios, 0.25).toFixed(3)}-${quantile(ratios, 0.75).toFixed(3)})`,
  );
} finally {
  if (!created) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
  if (created) await dropBenchDatabase(url);
}
