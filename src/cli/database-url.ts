import { UsageError } from './command.js';

/**
 * What the worker can say about `DATABASE_URL` before anything connects: whether it is a connection
 * string at all (a value such as `not-a-url` would otherwise become a host name the driver retries
 * for ever), and where it points, with the password hidden, for the start-up log line.
 */

/** The environment variable the worker checks and describes. */
export const DATABASE_URL = 'DATABASE_URL';

const SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

/** True for `scheme://...` that parses as a URL, or a Unix socket directory (`/var/run/postgresql`). */
export function isConnectionString(value: string): boolean {
  if (value.startsWith('/')) return true;
  if (!SCHEME.test(value)) return false;
  try {
    new URL(value);
    return true;
  } catch {
    return false;
  }
}

/** Throw `UsageError` when `DATABASE_URL` is set but is not a connection string (the value is not shown: it may hold a password). */
export function checkDatabaseUrl(env: Readonly<Record<string, string | undefined>>): void {
  const value = env[DATABASE_URL];
  if (value === undefined || value === '' || isConnectionString(value.trim())) return;
  throw new UsageError(
    `${DATABASE_URL} is not a valid connection string; expected postgres://user:password@host:5432/database`,
  );
}

/** `value` with its password (and any `password` query parameter) replaced by `***`. */
export function redactConnectionString(value: string): string {
  if (value.startsWith('/')) return value;
  try {
    const url = new URL(value);
    if (url.password !== '') url.password = '***';
    for (const key of [...url.searchParams.keys()]) {
      if (/pass/i.test(key)) url.searchParams.set(key, '***');
    }
    return url.toString().replace(/%2A%2A%2A/g, '***');
  } catch {
    return '(unparseable)';
  }
}

/** `DATABASE_URL` for a log line: redacted, or undefined when it is not set. */
export function describeDatabaseUrl(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const value = env[DATABASE_URL];
  return value === undefined || value === '' ? undefined : redactConnectionString(value.trim());
}
