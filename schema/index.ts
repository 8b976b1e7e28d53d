/**
 * `relaybus/schema`: the relaybus tables for a user's own `drizzle.config.ts`, so drizzle-kit
 * migrations of the application include them (and `drizzle-kit push` never drops them).
 */
export * from './postgres.js';
