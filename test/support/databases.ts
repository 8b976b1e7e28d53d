/**
 * Finds a Postgres server for tests, in the order DESIGN.md fixes: `DATABASE_URL`; a Docker engine
 * through testcontainers (a reusable container, so every test file shares it); PostgreSQL on
 * 127.0.0.1:5432. With none of them, the answer is a skip reason that the suites print.
 */
import pg from 'pg';

export type Found = { readonly url: string; readonly source: string } | { readonly skip: string };

const LOCAL_URL = 'postgres://postgres@127.0.0.1:5432/test';

async function answers(url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return undefined;
  } catch (error) {
    return (error as Error).message;
  } finally {
    await client.end().catch(() => {});
  }
}

async function fromDocker(): Promise<{ url: string } | { reason: string }> {
  try {
    const tc = await import('testcontainers');
    await tc.getContainerRuntimeClient();
  } catch (error) {
    return { reason: `no Docker engine (${(error as Error).message})` };
  }
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer('postgres:15-alpine').withReuse().start();
  return { url: container.getConnectionUri() };
}

let found: Promise<Found> | undefined;

/** The Postgres the tests use, found once per process. */
export function findPostgres(): Promise<Found> {
  found ??= (async (): Promise<Found> => {
    const fromEnv = process.env.DATABASE_URL;
    if (fromEnv) {
      const problem = await answers(fromEnv);
      return problem
        ? { skip: `DATABASE_URL is set but does not answer: ${problem}` }
        : { url: fromEnv, source: 'DATABASE_URL' };
    }
    const docker = await fromDocker();
    if ('url' in docker) return { url: docker.url, source: 'testcontainers' };
    const problem = await answers(LOCAL_URL);
    if (!problem) return { url: LOCAL_URL, source: '127.0.0.1:5432' };
    return {
      skip: `no Postgres: DATABASE_URL is not set, ${docker.reason}, and nothing answers on 127.0.0.1:5432 (${problem}). Export DATABASE_URL or start Docker to run these tests.`,
    };
  })();
  return found;
}

/** The Postgres URL, or throws with the skip reason (for tests that already checked `findPostgres`). */
export async function postgresUrl(): Promise<string> {
  const result = await findPostgres();
  if ('skip' in result) throw new Error(result.skip);
  return result.url;
}

let counter = 0;

/** A schema name no other test file or process uses. */
export function uniqueSchemaName(label: string): string {
  counter += 1;
  const safe = label
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .slice(0, 30);
  return `t_${safe}_${process.pid}_${counter}`;
}
