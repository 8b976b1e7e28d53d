/**
 * Fills a custom migration made by `drizzle-kit generate --custom --name relaybus_<kind>` with relaybus's SQL
 * (what `npx relaybus sql --adopt` / `--supplement` print):
 *
 * - adopt, before drizzle-kit's migration of the relaybus tables: where `relaybus setup` already made them, they
 *   are moved aside for the supplement to put back (data kept); elsewhere it does nothing;
 * - supplement, after it: what drizzle-kit cannot express (storage parameters, the 256 lane rows) and the record
 *   of the relaybus migrations the tables match (so a later `setup()` finds nothing to do).
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createPostgresAdoptSql, createPostgresSupplementSql } from 'relaybus/postgres';

const kind = process.argv[2];
if (kind !== 'adopt' && kind !== 'supplement') throw new Error('Usage: write-relaybus-migration.ts adopt|supplement');
const file = readdirSync('drizzle')
  .filter((name) => name.endsWith(`_relaybus_${kind}.sql`))
  .sort()
  .at(-1);
if (!file) throw new Error(`Run \`drizzle-kit generate --custom --name relaybus_${kind}\` first.`);
const path = `drizzle/${file}`;
const current = readFileSync(path, 'utf8');
if (!current.includes('relaybus')) {
  // The SQL starts with a newline: drizzle-kit ends its header comment without one.
  const sql =
    kind === 'adopt'
      ? createPostgresAdoptSql({ schema: 'relaybus' })
      : createPostgresSupplementSql({ schema: 'relaybus' });
  writeFileSync(path, `${current}${sql}`);
}
console.log(`relaybus ${kind} in ${path}`);
