import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import * as schema from './schema.js';

export const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
// A pool emits 'error' when the server drops an idle connection: unheard, it ends the process.
pool.on('error', (error) => console.error('idle Postgres connection lost:', error.message));

export const db = drizzle({ client: pool, schema });
