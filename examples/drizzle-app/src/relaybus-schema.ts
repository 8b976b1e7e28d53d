// The relaybus tables, for drizzle-kit: `drizzle-kit generate` puts them in this app's migrations.
export * from 'relaybus/schema';
