import { defineConfig } from 'drizzle-kit';

// The app's tables and the relaybus tables in one set of migrations. drizzle-kit reads each schema entry as a
// file path or glob, never as a package name, so src/relaybus-schema.ts re-exports 'relaybus/schema'.
// The relaybus tables live in their own Postgres schema, so schemaFilter lists it next to 'public'.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/schema.ts', './src/relaybus-schema.ts'],
  out: './drizzle',
  schemaFilter: ['public', 'relaybus'],
  dbCredentials: { url: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
});
