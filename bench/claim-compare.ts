/**
 * The claim statement of this checkout against the one of a git revision, on one state, as a ratio.
 *
 *   npm run bench:claim-compare -- --against HEAD [--deliveries 50000] [--batch 100] [--runs 40] [--unkeyed] [--ids]
 *                                   [--replay] [--plan] [--text <dir> ...]
 *
 * A change that saves 5-10% of the claim's execution is lost in a throughput run on this shared machine (identical
 * runs differ by 10-15%, and the machine's speed drifts within minutes). Here both texts run on the same state, in
 * turns, so drift cancels out: N deliveries published through the real store (10 events per key, two handlers; inline,
 * as the dispatch cells publish them, or with --ids each event with an id and so an events row the claim reads), one
 * owner's claim of `batch` in flight, then the next claim of that owner as a dispatcher sends it (completing the batch
 * in flight, claiming the next one), under EXPLAIN (ANALYZE, TIMING OFF) of its generic plan (as a named prepared
 * statement runs after its first executions) in a transaction that is rolled back. Prints the median execution time
 * of each and their ratio, after checking that both pick the same deliveries and complete the same ones.
 * The revision's text must take the same parameters; sql/fragments/ is read at that revision too. --plan prints the
 * working tree's plan first (EXPLAIN ANALYZE, BUFFERS; timing on), to see which node a change moved.
 * --text <dir>: the compared text is <dir>/claim-held-lanes.sql with the fragments <dir> holds (the others from sql/),
 * not the working tree's; the state is still set up with the working tree's statements. For an ablation, a part cut
 * out of a copy to see what it costs (bench/ablations/; whatever the compared text writes must start each tuple with
 * the id). Repeated, each file comes from the first directory that holds it: `--text bench/ablations/ids-only` is the
 * shipped claim writing only ids, `--text bench/ablations/ids-only --text bench/ablations/minimal-claim` the minimal
 * claim writing only ids.
 * --replay (events with ids): the state of a claim beside a backfill instead. A third handler, `h3`, subscribes after
 * the backlog, a backfill of it has created half its history, and two live events a key published since are held
 * behind it; the compared claim is `h3`'s first, naming every lane (replayed heads and their followers, up to the
 * held rows), with nothing in flight.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseLeaseToken } from '../src/core/lease-token.js';
import { fromPg, type PgClientLike, postgresStore, type PostgresStore } from '../src/postgres/index.js';
import { loadStatements, renderStatement, statementPath } from '../src/postgres/statements.js';
import type { ClaimedDelivery } from '../src/store/contract.js';
import { BACKLOG_TYPE, type Backlog, publishBacklog } from './lib/backlog.js';
import { createBenchDatabase, dropBenchDatabase } from './lib/db.js';
import { HANDLERS } from './lib/types.js';
import * as owners from '../test/support/claims.js';

const { values: args } = parseArgs({
  options: {
    against: { type: 'string', default: 'HEAD' },
    deliveries: { type: 'string', default: '50000' },
    batch: { type: 'string', default: '100' },
    runs: { type: 'string', default: '40' },
    unkeyed: { type: 'boolean', default: false },
    ids: { type: 'boolean', default: false },
    replay: { type: 'boolean', default: false },
    plan: { type: 'boolean', default: false },
    text: { type: 'string', multiple: true },
  },
});
const deliveries = Number(args.deliveries);
const batch = Number(args.batch);
const runs = Number(args.runs);
for (const [name, value] of Object.entries({ deliveries, batch, runs }))
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a positive integer`);
const schema = 'bench_claim_compare';
/** Followers per keyed head (ClaimParams.followers) of the claims in flight and of the compared claim. */
const followers = Number(process.env.CLAIM_FOLLOWERS ?? 0);

/** The first of these files of this repository that the revision has, or an error naming them and the revision. */
function atRevision(...paths: string[]): string {
  let failure: unknown;
  for (const path of paths) {
    try {
      return execFileSync('git', ['show', `${args.against}:${path}`], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (error) {
      failure = error;
    }
  }
  throw new Error(
    `cannot read ${paths.join(' or ')} at revision ${args.against}: ${(failure as Error).message.split('\n')[0]}`,
  );
}

/**
 * The claim statement of `--text <dir>` (the option repeated: each file from the first directory that holds it), with
 * the fragments the directories hold (the others, and the statement when none holds it, from sql/).
 */
function textIn(dirs: readonly string[]): string {
  const file = (name: string, fallback: string) =>
    readFileSync(dirs.map((dir) => join(dir, name)).find((path) => existsSync(path)) ?? fallback, 'utf8');
  return renderStatement(file('claim-held-lanes.sql', statementPath('claim-held-lanes')), schema, (name) =>
    file(`${name}.sql`, `sql/fragments/${name}.sql`),
  );
}

/** The highest $n a statement text uses. */
const parameterCount = (text: string): number =>
  Math.max(0, ...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));

/** The compared side: the working tree's statement, or the one of --text. */
const compared = args.text?.join(' + ') ?? 'working tree';
const texts = {
  // sql/ had no folders before the statements were grouped by job: a revision from then has the file at the top.
  [args.against]: renderStatement(
    atRevision(statementPath('claim-held-lanes'), 'sql/claim-held-lanes.sql'),
    schema,
    (name) => atRevision(`sql/fragments/${name}.sql`),
  ),
  [compared]: args.text === undefined ? loadStatements(schema)['claim-held-lanes'].text : textIn(args.text),
};
const sides = Object.keys(texts);
if (texts[sides[0]!] === texts[sides[1]!])
  console.log(`note: the claim statement is the same in both (${sides.join(', ')})`);

/** A parameter as an EXECUTE literal. */
function literal(client: pg.PoolClient, value: unknown): string {
  if (value === null) return 'NULL';
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (Array.isArray(value))
    return client.escapeLiteral(`{${value.map((v) => `"${String(v).replace(/["\\]/g, '\\$&')}"`).join(',')}}`);
  return client.escapeLiteral(String(value));
}

/**
 * --replay's state: `h3` subscribes to the backlog's type, a backfill of it creates half its history (in steps, as
 * runReplay takes them), and two live events a key (all three handlers) are published after, held behind that history.
 * Returns the handler the claims run.
 */
async function backfillHalf(store: PostgresStore<PgClientLike>, backlog: Backlog): Promise<string> {
  const handler = 'h3';
  await store.subscribe([{ eventType: BACKLOG_TYPE, handler, maxAttempts: 10 }]);
  const replay = await store.startReplay({ mode: 'backfill', handlers: [handler], requestedBy: 'claim-compare' });
  for (let created = 0; created < backlog.events / 2; ) {
    const step = await store.replayStep({ replayId: replay.id, limit: Math.min(5_000, backlog.events / 2 - created) });
    created += step.created;
  }
  const live = [...HANDLERS, handler].map((name) => ({ name, maxAttempts: 10 }));
  for (let round = 0; round < 2; round += 1)
    await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: Math.max(backlog.keys, 1) }, (_, k) => ({
          id: `live-${round}-${k}`,
          type: BACKLOG_TYPE,
          key: backlog.keys === 0 ? null : `k${k}`,
          payload: { live: k },
          handlers: live,
        })),
      ),
    );
  return handler;
}

const { url, created } = await createBenchDatabase('relaybus_bench_claim_compare');
const pool = new pg.Pool({ connectionString: url, max: 2 });
try {
  const store = postgresStore({ driver: fromPg(pool), schema });
  await store.setup();
  // A backfill replays events from their events rows: --replay publishes with ids.
  const backlog = await publishBacklog(pool, store, deliveries, !args.unkeyed, args.ids || args.replay);
  const handlers = args.replay ? [await backfillHalf(store, backlog)] : HANDLERS.slice();
  await pool.query(`ANALYZE "${schema}".relaybus_deliveries`);
  const owner = 'claim-compare';
  const inFlight: ClaimedDelivery[] = [];
  // --replay: nothing in flight; the compared claim names every lane (as a step's wake-up names the lanes it wrote).
  while (!args.replay && inFlight.length < batch) {
    // With followers, as a dispatcher's claims under a keyed backlog: the next claim completes the heads and their runs.
    const more = await owners.claim(store, {
      owner,
      handlers,
      limit: batch - inFlight.length,
      leaseDurationMs: 600_000,
      followers,
    });
    if (more.length === 0) break;
    inFlight.push(...more);
  }
  const leases = inFlight.map((d) => ({ id: d.id, ...parseLeaseToken(d.leaseToken) }));
  // The next claim of this owner, as the store sends it with the completions riding (no walk cursors, probes or
  // named lanes, no retry lookahead; followers from CLAIM_FOLLOWERS, default none; no sibling owners; room for the batch
  // and its followers): $1-$21 of sql/hot-path/claim-held-lanes.sql.
  const params: unknown[] = [
    owner,
    handlers,
    batch,
    600_000,
    null,
    [],
    [],
    [],
    leases.map((l) => l.id),
    leases.map((l) => l.lane),
    leases.map((l) => l.epoch),
    leases.map((l) => l.claims),
    false,
    [],
    [],
    [],
    args.replay ? Array.from({ length: 256 }, (_, lane) => lane) : [],
    0,
    followers,
    [],
    batch * (1 + followers),
  ];
  const {
    rows: [held],
  } = await pool.query<{ lanes: number }>(
    `SELECT count(*)::int AS lanes FROM "${schema}".relaybus_lanes WHERE lease_owner = $1`,
    [owner],
  );
  console.log(
    `${deliveries} deliveries (${backlog.keys === 0 ? 'unkeyed' : `${backlog.keys} keys`}, ${args.ids || args.replay ? 'events with ids: events rows' : 'events inline'})${args.replay ? `, h3 backfilled half way with live events held` : ''}, ${inFlight.length} in flight in ${held!.lanes} lanes; the next claim completes them and claims up to ${batch}`,
  );

  const client = await pool.connect();
  try {
    const prepared = new Map<string, string>();
    for (const [index, side] of sides.entries()) {
      const name = `claim_compare_${index}`;
      await client.query(`PREPARE ${name} AS ${texts[side]}`);
      prepared.set(side, name);
    }
    await client.query('SET plan_cache_mode = force_generic_plan');
    // A revision from before a parameter was added takes the ones it has (each new one's value here changes nothing).
    const execute = (side: string) =>
      `EXECUTE ${prepared.get(side)}(${params
        .slice(0, parameterCount(texts[side]!))
        .map((p) => literal(client, p))
        .join(', ')})`;

    if (args.plan) {
      await client.query('BEGIN');
      const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) ${execute(compared)}`);
      await client.query('ROLLBACK');
      console.log(rows.map((row) => row['QUERY PLAN']).join('\n'));
    }

    // Both pick and complete the same deliveries (run for real, rolled back).
    const outcome: string[] = [];
    for (const side of sides) {
      await client.query('BEGIN');
      const {
        rows: [summary],
      } = await client.query<{ claimed: string | null; completed_ids: string[] | null }>(execute(side));
      await client.query('ROLLBACK');
      // The id comes first in every revision's tuple (the rest of its shape may differ).
      const picked = (JSON.parse(summary?.claimed ?? '[]') as [string][]).map(([id]) => id).sort();
      outcome.push(JSON.stringify({ picked, completed: summary?.completed_ids ?? 'all' }));
    }
    if (outcome[0] !== outcome[1])
      console.log(`warning: the two texts picked or completed different deliveries; the times compare different work`);

    // Each round runs both, back to back, in alternating order; the figure is the median of the rounds' ratios, which
    // a shift of the machine's speed between rounds (seen here: 2.6 <-> 4.2 ms for the same text) does not move.
    const times = new Map<string, number[]>(sides.map((side) => [side, []]));
    for (let run = 0; run < runs + 2; run += 1) {
      for (const side of run % 2 === 0 ? sides : [...sides].reverse()) {
        await client.query('BEGIN');
        const { rows } = await client.query<{ 'QUERY PLAN': [{ 'Execution Time': number }] }>(
          `EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) ${execute(side)}`,
        );
        await client.query('ROLLBACK');
        // The first two rounds warm the caches.
        if (run >= 2) times.get(side)!.push(rows[0]!['QUERY PLAN'][0]['Execution Time']);
      }
    }
    const median = (values: readonly number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const [base, changed] = sides.map((side) => times.get(side)!);
    const ratios = base!.map((ms, round) => changed![round]! / ms);
    for (const side of sides)
      console.log(`${side}: median ${median(times.get(side)!).toFixed(3)} ms over ${runs} runs`);
    console.log(
      `${compared} / ${args.against}: ${median(ratios).toFixed(3)} (median of ${runs} paired rounds; middle half ${median(ratios.filter((r) => r <= median(ratios))).toFixed(3)}-${median(ratios.filter((r) => r >= median(ratios))).toFixed(3)})`,
    );
  } finally {
    client.release();
  }
} finally {
  await pool.end();
  if (created) await dropBenchDatabase(url);
}
