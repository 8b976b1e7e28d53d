/**
 * "What one delivery leaves behind", reproduced with pageinspect for relaybus and for the 0.1.0
 * row-lease baseline (bench/contenders/row-lease.ts).
 *
 *   npm run bench:pageinspect
 *
 * In a database of its own (autovacuum off on the tables, so the evidence stays), each design
 * publishes one unkeyed event with one handler, claims it and completes it. Then the script reads
 * the heap page of the delivery table (line pointers, xmin/xmax, ctid and the HOT flags), every
 * index's leaf entries (which heap tuples they point at), the versions of the lane row the claim
 * touched (relaybus), and the tuple counters of pg_stat_user_tables. Output:
 * bench/results/pageinspect-relaybus.txt and bench/results/pageinspect-row-lease.txt.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { fromPg, postgresStore } from '../src/postgres/index.js';
import { rowLeaseSql } from './contenders/row-lease.js';
import { connect, createBenchDatabase, dropBenchDatabase } from './lib/db.js';
import { sleep } from './lib/stats.js';

const INFOMASK: [number, string][] = [
  [0x0100, 'XMIN_COMMITTED'],
  [0x0200, 'XMIN_INVALID'],
  [0x0400, 'XMAX_COMMITTED'],
  [0x0800, 'XMAX_INVALID'],
  [0x0080, 'XMAX_LOCK_ONLY'],
];
const INFOMASK2: [number, string][] = [
  [0x4000, 'HOT_UPDATED'],
  [0x8000, 'HEAP_ONLY'],
];

function flags(infomask: number, infomask2: number): string {
  const names = [...INFOMASK2.filter(([bit]) => infomask2 & bit), ...INFOMASK.filter(([bit]) => infomask & bit)].map(
    ([, name]) => name,
  );
  return names.join('|') || '-';
}

interface Item {
  lp: number;
  lp_flags: number;
  t_xmin: string | null;
  t_xmax: string | null;
  t_ctid: string | null;
  t_infomask: number | null;
  t_infomask2: number | null;
  t_data: Buffer | null;
}

async function heapItems(client: pg.Client, table: string, block: number): Promise<Item[]> {
  const { rows } = await client.query<Item>(
    `SELECT lp, lp_flags, t_xmin::text, t_xmax::text, t_ctid::text, t_infomask, t_infomask2, t_data FROM heap_page_items(get_raw_page($1, $2))`,
    [table, block],
  );
  return rows;
}

function itemLine(item: Item): string {
  if (item.t_infomask === null)
    return `${item.lp} (line pointer only: ${['unused', 'normal', 'redirect', 'dead'][item.lp_flags] ?? item.lp_flags})`;
  return `${item.lp} ${item.t_xmin} ${item.t_xmax} ${item.t_ctid} ${flags(item.t_infomask, item.t_infomask2 ?? 0)}`;
}

async function indexReport(client: pg.Client, schema: string, table: string): Promise<string[]> {
  const { rows: indexes } = await client.query<{ name: string; pages: string }>(
    `SELECT c.relname AS name, (pg_relation_size(c.oid) / current_setting('block_size')::int)::text AS pages
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
     WHERE n.nspname = $1 AND t.relname = $2 ORDER BY c.relname`,
    [schema, table],
  );
  const lines = [`indexes of ${table}: ${indexes.length}`];
  let total = 0;
  for (const index of indexes) {
    const tids: string[] = [];
    for (let block = 1; block < Number(index.pages); block += 1) {
      const { rows } = await client.query<{ htid: string | null; ctid: string }>(
        `SELECT coalesce(htid::text, ctid::text) AS htid, ctid::text FROM bt_page_items(get_raw_page($1, $2))`,
        [`"${schema}"."${index.name}"`, block],
      );
      for (const row of rows) tids.push(row.htid ?? row.ctid);
    }
    total += tids.length;
    lines.push(
      `${index.name} entries=${tids.length}${tids.length > 0 && tids.length <= 24 ? ' -> heap tids ' + tids.join(' ') : ''}`,
    );
  }
  lines.push(`index entries in total: ${total}`);
  return lines;
}

async function counters(client: pg.Client, schema: string, tables: string[]): Promise<string[]> {
  await client.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await client.query<{ relname: string; ins: string; upd: string; hot: string; del: string }>(
    `SELECT relname, n_tup_ins AS ins, n_tup_upd AS upd, n_tup_hot_upd AS hot, n_tup_del AS del FROM pg_stat_user_tables
     WHERE schemaname = $1 AND relname = ANY ($2) ORDER BY relname`,
    [schema, tables],
  );
  return rows.map((r) => `${r.relname} inserted=${r.ins} updated=${r.upd} hot_updated=${r.hot} deleted=${r.del}`);
}

async function relaybusCase(url: string): Promise<string[]> {
  const schema = 'pi_relaybus';
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const store = postgresStore({ driver: fromPg(pool), schema });
  await store.setup();
  for (const table of ['relaybus_deliveries', 'relaybus_lanes'])
    await pool.query(`ALTER TABLE "${schema}".${table} SET (autovacuum_enabled = false)`);
  const client = await pool.connect();
  await client.query('BEGIN');
  await store.publish(client, [
    { id: 'pi-1', type: 'bench.event', payload: { i: 1 }, handlers: [{ name: 'h1', maxAttempts: 10 }] },
  ]);
  await client.query('COMMIT');
  client.release();
  const [claimed] = await store
    .openClaims('pageinspect')
    .claim({ handlers: ['h1'], limit: 1, leaseDurationMs: 30_000 });
  if (!claimed) throw new Error('relaybus: nothing claimed');
  const [done] = await store.completeMany([{ deliveryId: claimed.id, leaseToken: claimed.leaseToken }]);
  await pool.end(); // the backend exits and flushes its table statistics
  await sleep(500);
  const admin = await connect(url);
  try {
    const lines = [
      `relaybus: one event, one handler: publish, claim (lane ${claimed.lane}), completeMany -> ${done}`,
      '',
    ];
    const items = await heapItems(admin, `"${schema}".relaybus_deliveries`, 0);
    lines.push(
      `heap page 0 of relaybus_deliveries (${items.length} line pointers)`,
      'lp xmin xmax ctid flags',
      ...items.map(itemLine),
      '',
    );
    lines.push(...(await indexReport(admin, schema, 'relaybus_deliveries')), '');
    const {
      rows: [where],
    } = await admin.query<{ ctid: string }>(`SELECT ctid::text FROM "${schema}".relaybus_lanes WHERE lane = $1`, [
      claimed.lane,
    ]);
    const block = Number(/\((\d+),/.exec(where!.ctid)![1]);
    const laneItems = (await heapItems(admin, `"${schema}".relaybus_lanes`, block)).filter(
      (item) => item.t_data !== null && item.t_data.readInt16LE(0) === claimed.lane,
    );
    lines.push(
      `lane ${claimed.lane}: versions of that lane row on heap page ${block} of relaybus_lanes`,
      'lp xmin xmax ctid flags',
      ...laneItems.map(itemLine),
      '',
    );
    lines.push(...(await indexReport(admin, schema, 'relaybus_lanes')), '');
    lines.push('tuple counters:', ...(await counters(admin, schema, ['relaybus_deliveries', 'relaybus_lanes'])));
    return lines;
  } finally {
    await admin.end();
  }
}

async function rowLeaseCase(url: string): Promise<string[]> {
  const schema = 'pi_row_lease';
  const admin = await connect(url);
  await admin.query(rowLeaseSql.ddl(schema));
  await admin.query(`ALTER TABLE "${schema}".rl_deliveries SET (autovacuum_enabled = false)`);
  await admin.end();
  const client = await connect(url);
  await client.query('BEGIN');
  await client.query(rowLeaseSql.publish(schema), [
    JSON.stringify([{ ord: 0, id: 'pi-1', key: null, payload: { i: 1 } }]),
    ['h1'],
  ]);
  await client.query('COMMIT');
  const {
    rows: [claimed],
  } = await client.query<{ id: string; lease_token: string }>(rowLeaseSql.claim(schema), [
    ['h1'],
    1,
    'pageinspect',
    'pageinspect',
    30_000,
  ]);
  if (!claimed) throw new Error('row-lease: nothing claimed');
  const { rowCount } = await client.query(rowLeaseSql.complete(schema), [claimed.id, claimed.lease_token]);
  await client.end();
  await sleep(500);
  const reader = await connect(url);
  try {
    const lines = [
      `row-lease (0.1.0 baseline): one event, one handler: publish, claim, complete -> ${rowCount === 1}`,
      '',
    ];
    const items = await heapItems(reader, `"${schema}".rl_deliveries`, 0);
    lines.push(
      `heap page 0 of rl_deliveries (${items.length} line pointers)`,
      'lp xmin xmax ctid flags',
      ...items.map(itemLine),
      '',
    );
    lines.push(...(await indexReport(reader, schema, 'rl_deliveries')), '');
    lines.push('tuple counters:', ...(await counters(reader, schema, ['rl_deliveries'])));
    return lines;
  } finally {
    await reader.end();
  }
}

const { url, created } = await createBenchDatabase('relaybus_bench_pageinspect');
try {
  const admin = await connect(url);
  await admin.query('CREATE EXTENSION IF NOT EXISTS pageinspect');
  await admin.end();
  for (const [name, body] of [
    ['relaybus', relaybusCase],
    ['row-lease', rowLeaseCase],
  ] as const) {
    const lines = await body(url);
    const file = fileURLToPath(new URL(`./results/pageinspect-${name}.txt`, import.meta.url));
    writeFileSync(file, lines.join('\n') + '\n');
    console.log(lines.join('\n'));
    console.log(`(wrote ${file})\n`);
  }
} finally {
  if (created) await dropBenchDatabase(url);
}
