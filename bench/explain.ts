/**
 * The plans of relaybus's claim and completion at a deep backlog, with stale statistics.
 *
 *   npm run bench:explain [-- --deliveries 200000 --batch 1000]
 *
 * DESIGN.md's trap: a fenced completion written as DELETE ... USING a join with the lanes table got
 * a plan driven from `lanes` when the lanes statistics were taken while no lane was owned, and it
 * scanned every row of the held lanes (150-215 ms per 1,000-row batch at 200k). This script builds
 * that situation with the real store: N deliveries (N/2 keyed events, two handlers, 10 events per
 * key) published through `store.publish`, ANALYZE of every table while no lane is owned, one real
 * claim of `batch` deliveries, then EXPLAIN (ANALYZE, BUFFERS) of the statements of sql/ as the store
 * runs them (each inside a transaction that is rolled back): claim-held-lanes, acquire-lanes,
 * complete-many, plus two hand-written forms of the completion fence for comparison (the join the
 * trap describes, and a scalar subquery). The same is repeated after a fresh ANALYZE taken while the
 * lanes are owned. Output: bench/results/explain.txt (plans and a summary of execution times).
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { laneOf } from '../src/core/lanes.js';
import { fromPg, postgresStore } from '../src/postgres/index.js';
import { claimedTuples } from '../src/postgres/rows.js';
import { loadStatements } from '../src/postgres/statements.js';
import type { ClaimedDelivery } from '../src/store/contract.js';
import { parseLeaseToken } from '../src/core/lease-token.js';
import { createBenchDatabase, dropBenchDatabase } from './lib/db.js';
import { publishBacklog } from './lib/backlog.js';
import { HANDLERS } from './lib/types.js';
import * as owners from '../test/support/claims.js';

const { values: args } = parseArgs({
  options: { deliveries: { type: 'string', default: '200000' }, batch: { type: 'string', default: '1000' } },
});
const deliveries = Number(args.deliveries);
const batch = Number(args.batch);
const schema = 'bench_explain';
const out: string[] = [];
const summary: string[] = [];
const say = (line: string) => {
  console.log(line);
  out.push(line);
};

const { url, created } = await createBenchDatabase('relaybus_bench_explain');
const pool = new pg.Pool({ connectionString: url, max: 4 });
try {
  const store = postgresStore({ driver: fromPg(pool), schema });
  await store.setup();
  const statements = loadStatements(schema);
  const { events, keys, publishMs } = await publishBacklog(pool, store, deliveries);
  say(`# relaybus claim and completion plans at a deep backlog`);
  say('');
  say(
    `${deliveries} pending deliveries (${events} keyed events x ${HANDLERS.length} handlers, ${keys} keys) published through store.publish in ${(publishMs / 1000).toFixed(1)} s; ${(await pool.query('SELECT version()')).rows[0].version}`,
  );

  async function analyzeAll(): Promise<void> {
    for (const table of ['relaybus_events', 'relaybus_deliveries', 'relaybus_lanes', 'relaybus_subscriptions'])
      await pool.query(`ANALYZE "${schema}".${table}`);
  }

  /**
   * EXPLAIN (ANALYZE, BUFFERS) of `text` in a rolled-back transaction. `generic`: the plan a named
   * prepared statement gets once Postgres switches to its generic plan (the store runs named
   * statements thousands of times), forced with plan_cache_mode and EXPLAIN EXECUTE.
   */
  let prepared = 0;
  async function explain(title: string, text: string, params: unknown[], generic = false): Promise<number> {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      let rows: Record<string, string>[];
      if (generic) {
        const name = `explained_${++prepared}`;
        await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
        await client.query(`PREPARE ${name} AS ${text}`);
        try {
          const literal = (value: unknown): string => {
            if (value === null || value === undefined) return 'NULL';
            if (typeof value === 'number') return String(value);
            if (Array.isArray(value)) return client.escapeLiteral(`{${value.map(String).join(',')}}`);
            return client.escapeLiteral(String(value));
          };
          ({ rows } = await client.query(
            `EXPLAIN (ANALYZE, BUFFERS) EXECUTE ${name}(${params.map(literal).join(', ')})`,
          ));
        } finally {
          await client.query('ROLLBACK').catch(() => {});
          await client.query(`DEALLOCATE ${name}`).catch(() => {});
          await client.query('BEGIN');
        }
      } else {
        ({ rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, VERBOSE OFF, COSTS ON) ${text}`, params));
      }
      await client.query('ROLLBACK');
      const plan = rows.map((r: Record<string, string>) => r['QUERY PLAN'] ?? '');
      const ms = Number(/Execution Time: ([\d.]+) ms/.exec(plan.join('\n'))?.[1] ?? NaN);
      say('');
      say(`## ${title}: ${ms.toFixed(2)} ms`);
      say('');
      say('```text');
      for (const line of plan) say(line);
      say('```');
      return ms;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      say(`## ${title}: FAILED ${(error as Error).message}`);
      return NaN;
    } finally {
      client.release();
    }
  }

  const completeJoin = `DELETE FROM "${schema}".relaybus_deliveries d
USING unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::int[]) AS t(id, lane, epoch, claims), "${schema}".relaybus_lanes l
WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
  AND l.lane = t.lane AND l.epoch = t.epoch AND t.id = ANY (l.in_flight)
RETURNING d.id::text AS id`;
  const completeScalar = `DELETE FROM "${schema}".relaybus_deliveries d
USING unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::int[]) AS t(id, lane, epoch, claims)
WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
  AND (SELECT l.epoch = t.epoch AND t.id = ANY (l.in_flight) FROM "${schema}".relaybus_lanes l WHERE l.lane = t.lane)
RETURNING d.id::text AS id`;

  const shipped = statements['claim-held-lanes'].text;
  /** claim-held-lanes' parameters for a claim of `owner` with no cursors, completions, probes, named lanes or lookahead. */
  const claimParamsOf = (owner: string) =>
    [
      owner,
      HANDLERS.slice(),
      batch,
      600_000,
      null,
      [],
      [],
      [],
      [],
      [],
      [],
      [],
      false,
      [],
      [],
      [],
      [],
      0,
      Number(process.env.EXPLAIN_FOLLOWERS ?? 0),
      [],
      batch * (1 + Number(process.env.EXPLAIN_FOLLOWERS ?? 0)),
    ] as unknown[];
  const q = `"${schema}".`;

  /** Run a claim statement for real inside a rolled-back transaction: how many it picks, and whether each keyed pick is its key's head. */
  async function checkClaim(text: string, owner: string): Promise<string> {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { rows: out } = await client.query<{ claimed: string | null }>(text, claimParamsOf(owner));
      const rows = claimedTuples(out[0]?.claimed ?? null).map(([id]) => ({ id }));
      const {
        rows: [bad],
      } = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${q}relaybus_deliveries d WHERE d.id = ANY ($1::bigint[]) AND d.key IS NOT NULL
           AND EXISTS (SELECT 1 FROM ${q}relaybus_deliveries p WHERE p.lane = d.lane AND p.handler = d.handler AND p.key = d.key
                       AND p.sequence < d.sequence AND p.status = 'pending' AND NOT (p.id = ANY ($1::bigint[])))`,
        [rows.map((r) => r.id)],
      );
      await client.query('ROLLBACK');
      return `${rows.length} picked, ${bad!.n} of them not the head of their key`;
    } finally {
      client.release();
    }
  }

  for (const phase of [
    'stale statistics (lanes analyzed while no lane was owned)',
    'fresh statistics (analyzed while the lanes are owned)',
  ]) {
    const stale = phase.startsWith('stale');
    if (stale) await analyzeAll();
    const owner = stale ? 'explain-owner-1' : 'explain-owner-2';
    const claimed: ClaimedDelivery[] = [];
    // The real claim (several statements: held lanes, then free lanes 4, 8, 16, ... at a time) until the batch is full.
    const claimStarted = performance.now();
    while (claimed.length < batch) {
      const more = await owners.claim(store, {
        owner,
        handlers: HANDLERS.slice(),
        limit: batch - claimed.length,
        leaseDurationMs: 600_000,
      });
      if (more.length === 0) break;
      claimed.push(...more);
    }
    const claimMs = performance.now() - claimStarted;
    if (!stale) await analyzeAll();
    const {
      rows: [held],
    } = await pool.query(
      `SELECT count(*)::int AS lanes, sum(cardinality(in_flight))::int AS in_flight FROM "${schema}".relaybus_lanes WHERE lease_owner = $1`,
      [owner],
    );
    const {
      rows: [inHeld],
    } = await pool.query(
      `SELECT count(*)::int AS n FROM "${schema}".relaybus_deliveries d WHERE d.lane IN (SELECT lane FROM "${schema}".relaybus_lanes WHERE lease_owner = $1)`,
      [owner],
    );
    say('');
    say(`# ${phase}`);
    say('');
    say(
      `store.claim (limit ${batch}) returned ${claimed.length} deliveries in ${claimMs.toFixed(1)} ms; the owner holds ${held.lanes} lanes with ${held.in_flight} ids in flight; those lanes hold ${inHeld.n} delivery rows.`,
    );
    const leases = claimed.map((c) => ({ id: c.id, ...parseLeaseToken(c.leaseToken) }));
    const completeParams = [
      leases.map((l) => l.id),
      leases.map((l) => l.lane),
      leases.map((l) => l.epoch),
      leases.map((l) => l.claims),
    ];
    const label = stale ? 'stale' : 'fresh';
    const results: [string, number][] = [];
    const claimParams = claimParamsOf(owner);
    results.push([
      'claim-held-lanes (sql/hot-path/claim-held-lanes.sql)',
      await explain(`${label}: claim-held-lanes, limit ${batch}`, shipped, claimParams),
    ]);
    results.push([
      'claim-held-lanes, generic plan',
      await explain(
        `${label}: claim-held-lanes, limit ${batch}, generic plan (named prepared statement)`,
        shipped,
        claimParams,
        true,
      ),
    ]);
    say('');
    say(`Picks (run for real, rolled back): ${await checkClaim(shipped, owner)}.`);
    results.push([
      'acquire-lanes (sql/hot-path/acquire-lanes.sql), take 4',
      await explain(`${label}: acquire-lanes, take 4`, statements['acquire-lanes'].text, [
        'explain-other',
        HANDLERS.slice(),
        4,
        0,
        600_000,
        null,
        [],
      ]),
    ]);
    results.push([
      `complete-many (sql/hot-path/complete-many.sql), ${leases.length} ids`,
      await explain(
        `${label}: complete-many (EXISTS fence, as shipped), ${leases.length} ids`,
        statements['complete-many'].text,
        [...completeParams, false, null],
      ),
    ]);
    results.push([
      'complete-many, generic plan',
      await explain(
        `${label}: complete-many, generic plan (named prepared statement)`,
        statements['complete-many'].text,
        [...completeParams, false, null],
        true,
      ),
    ]);
    results.push([
      'complete, fence as a join with lanes (the trap)',
      await explain(`${label}: completion with the fence as a join (the trap's form)`, completeJoin, completeParams),
    ]);
    results.push([
      'complete, fence as a scalar subquery',
      await explain(`${label}: completion with the fence as a scalar subquery`, completeScalar, completeParams),
    ]);
    summary.push(
      `| ${phase} | ${results.map(([, ms]) => (Number.isFinite(ms) ? ms.toFixed(1) : 'failed')).join(' | ')} |`,
    );
    if (stale) {
      await store.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
      await owners.relinquish(store, owner);
    }
    void laneOf;
  }
  const head = `| statistics | claim-held-lanes | claim, generic plan | acquire-lanes | complete-many (shipped) | complete-many, generic plan | fence as join (trap) | fence as scalar subquery |\n| --- | --- | --- | --- | --- | --- | --- | --- |`;
  out.splice(3, 0, '', '## Summary: execution time in ms (EXPLAIN ANALYZE)', '', head, ...summary);
  console.log(['', head, ...summary].join('\n'));
} finally {
  await pool.end();
  if (created) await dropBenchDatabase(url);
}
const file = fileURLToPath(new URL('./results/explain.txt', import.meta.url));
writeFileSync(file, out.join('\n') + '\n');
console.log(`wrote ${file}`);
