// The relaybus tables, for drizzle-kit (which reads files, not package names): `drizzle-kit generate` puts them
// in this app's migrations.
export * from 'relaybus/schema';
