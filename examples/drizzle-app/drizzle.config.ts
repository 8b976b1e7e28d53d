import { defineConfig } from 'drizzle-kit';

// The app's tables and the relaybus tables (re-exported from 'relaybus/schema') in one set of migrations.
// The relaybus tables live in their own Postgres schema, so schemaFilter lists it next to 'public'.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/schema.ts', './src/relaybus-schema.ts'],
  out: './drizzle',
  schemaFilter: ['public', 'relaybus'],
  dbCredentials: { url: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
});
