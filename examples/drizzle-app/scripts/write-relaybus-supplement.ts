/**
 * drizzle-kit cannot express the relaybus table storage parameters nor the 256 lane rows. This fills the
 * custom migration made by `drizzle-kit generate --custom --name relaybus_supplement` with them, and with
 * the record of the relaybus migrations the tables match (so a later `setup()` finds nothing to do).
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createPostgresSupplementSql } from 'relaybus/postgres';

const file = readdirSync('drizzle')
  .filter((name) => name.endsWith('_relaybus_supplement.sql'))
  .sort()
  .at(-1);
if (!file) throw new Error('Run `drizzle-kit generate --custom --name relaybus_supplement` first.');
const path = `drizzle/${file}`;
const current = readFileSync(path, 'utf8');
if (!current.includes('relaybus_lanes')) {
  // The supplement starts with a newline: drizzle-kit ends its header comment without one.
  writeFileSync(path, `${current}${createPostgresSupplementSql({ schema: 'relaybus' })}`);
}
console.log(`relaybus supplement in ${path}`);
