import { defineConfig } from 'drizzle-kit';

// relaybus's own migrations: `npm run db:generate` diffs schema/postgres.ts into schema/migrations/.
export default defineConfig({
  dialect: 'postgresql',
  schema: './schema/postgres.ts',
  out: './schema/migrations',
  schemaFilter: ['relaybus'],
});
