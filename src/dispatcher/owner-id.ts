import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

/**
 * A unique lease owner id `prefix:pid:random` (prefix defaults to the host name), new for every
 * claim loop so a restarted process never inherits a dead predecessor's lanes.
 */
export function createOwnerId(prefix?: string): string {
  const base = (prefix ?? hostname()) || 'relaybus';
  return `${base.slice(0, 100)}:${process.pid}:${randomBytes(6).toString('hex')}`;
}
