/**
 * The published declarations, as a user with one Postgres driver installed compiles them: the packed package in a
 * fresh project with only that driver (pg, postgres or @electric-sql/pglite are optional peers), `strict` and
 * `skipLibCheck: false`, so every relaybus .d.ts the app reaches is checked and none may need another driver's types.
 * Each app also checks that the driver's own transaction type carries through the bus: a transactional handler's
 * `ctx.transaction` is the driver's client with typed results, and `bus.publish` refuses the database handle
 * (test/types/handler-transaction-types.ts checks the same against the sources, on every `tsc --noEmit`).
 */
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freshProject, packedTarball, removeWork, run, workDir } from '../support/packed-package.js';

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    skipLibCheck: false,
    noEmit: true,
    types: ['node'],
  },
  include: ['app.ts'],
};

const EVENT = [
  "import { createRelayBus, defineEvent, Type } from 'relaybus';",
  "const OrderPlaced = defineEvent('order.placed', Type.Object({ orderId: Type.String() }));",
].join('\n');

interface DriverApp {
  readonly name: string;
  /** The driver packages the project installs: no other Postgres driver is present. */
  readonly packages: readonly string[];
  readonly app: string;
  /**
   * Errors of the driver's own declarations, not relaybus's: PGlite's need `@types/emscripten`, which it does not
   * install (a PGlite user with `skipLibCheck: false` gets them without relaybus too).
   */
  readonly foreignErrors?: RegExp;
}

const DRIVERS: readonly DriverApp[] = [
  {
    name: 'pg',
    packages: ['pg', '@types/pg'],
    app: `import pg from 'pg';
${EVENT}
import { fromPg, postgresStore } from 'relaybus/postgres';

const pool = new pg.Pool();
const bus = createRelayBus({ store: postgresStore({ driver: fromPg(pool) }), events: [OrderPlaced] });
bus.on(OrderPlaced, 'count-orders', { transactional: true }, async (order, ctx) => {
  const { rows } = await ctx.transaction.query<{ id: string }>('SELECT $1::text AS id', [order.orderId]);
  const id: string | undefined = rows[0]?.id;
  const client: pg.PoolClient = ctx.transaction;
  void [id, client];
});
const client = await pool.connect();
await bus.publish(client, OrderPlaced, { orderId: 'o-1' });
// @ts-expect-error the pool is not a transaction
await bus.publish(pool, OrderPlaced, { orderId: 'o-1' });
`,
  },
  {
    name: 'postgres.js',
    packages: ['postgres'],
    app: `import postgres from 'postgres';
${EVENT}
import { fromPostgresJs, postgresStore } from 'relaybus/postgres';

const sql = postgres();
const bus = createRelayBus({ store: postgresStore({ driver: fromPostgresJs(sql) }), events: [OrderPlaced] });
bus.on(OrderPlaced, 'count-orders', { transactional: true }, async (order, ctx) => {
  const rows = await ctx.transaction<{ id: string }[]>\`SELECT \${order.orderId}::text AS id\`;
  const id: string | undefined = rows[0]?.id;
  const tx: postgres.TransactionSql = ctx.transaction;
  void [id, tx];
});
await sql.begin((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1' }));
// @ts-expect-error the client itself is not a transaction
await bus.publish(sql, OrderPlaced, { orderId: 'o-1' });
`,
  },
  {
    name: 'PGlite',
    packages: ['@electric-sql/pglite'],
    foreignErrors:
      /^node_modules\/@electric-sql\/pglite\/dist\/[\w-]+\.d\.ts\(\d+,\d+\): error TS\d+: .*\b(Emscripten|EmscriptenModule|FS)\b/,
    app: `import { PGlite, type Transaction } from '@electric-sql/pglite';
${EVENT}
import { fromPglite, postgresStore } from 'relaybus/postgres';

const db = new PGlite();
const bus = createRelayBus({ store: postgresStore({ driver: fromPglite(db) }), events: [OrderPlaced] });
bus.on(OrderPlaced, 'count-orders', { transactional: true }, async (order, ctx) => {
  const { rows } = await ctx.transaction.query<{ id: string }>('SELECT $1::text AS id', [order.orderId]);
  const id: string | undefined = rows[0]?.id;
  const tx: Transaction = ctx.transaction;
  void [id, tx];
});
await db.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1' }));
// @ts-expect-error the database itself is not a transaction
await bus.publish(db, OrderPlaced, { orderId: 'o-1' });
`,
  },
];

/** The error lines of `tsc -p .` in `dir` (none when it exits 0). */
async function compileErrors(dir: string): Promise<string[]> {
  try {
    await run(join(dir, 'node_modules/.bin/tsc'), ['-p', '.', '--pretty', 'false'], dir);
    return [];
  } catch (error) {
    const lines = (error as Error).message.split('\n').filter((line) => /error TS\d+/.test(line));
    assert.ok(lines.length > 0, (error as Error).message); // tsc failed without a diagnostic: not a type error
    return lines;
  }
}

const POSTGRES_DRIVERS = ['pg', '@types/pg', 'postgres', '@electric-sql/pglite'];

describe('the packed declarations, with one Postgres driver installed', () => {
  const work = workDir('declarations');
  let tarball = '';

  before(async () => {
    tarball = await packedTarball(work);
  });
  after(() => removeWork(work));

  for (const driver of DRIVERS) {
    it(`${driver.name} only: the app compiles with skipLibCheck off; ctx.transaction and publish take the driver's own transaction`, async () => {
      const dir = await freshProject(join(work, driver.name.replace(/\W/g, '-')), tarball, driver.packages, [
        'typescript',
        '@types/node',
      ]);
      for (const other of POSTGRES_DRIVERS.filter((name) => !driver.packages.includes(name))) {
        assert.ok(!existsSync(join(dir, 'node_modules', other)), `${other} is not installed in the ${driver.name} app`);
      }
      writeFileSync(join(dir, 'tsconfig.json'), `${JSON.stringify(TSCONFIG, null, 2)}\n`);
      writeFileSync(join(dir, 'app.ts'), driver.app);
      const errors = await compileErrors(dir);
      assert.deepEqual(
        errors.filter((line) => !driver.foreignErrors?.test(line)),
        [],
        'tsc reports no error in the app or in relaybus',
      );
    });
  }
});
