/**
 * Which ordering key an event carries, known to the orchestrator (validation) and to the dispatcher
 * processes (the in-process "running" marker per (handler, key)). Keys are numbers here; the
 * published key string is `k<number>`.
 */
import { laneOf } from '../../src/core/lanes.js';

export type KeyMap =
  /** No keys: nothing is ordered. */
  | { readonly kind: 'none' }
  /** Events of the publish plans: event i = n * P + p has key (n mod K) * P + p (see types.ts keyOf/indexOf). */
  | { readonly kind: 'modulo'; readonly publishers: number; readonly keysPerPublisher: number }
  /** An explicit table: key number of event i (-1: unkeyed). */
  | { readonly kind: 'table'; readonly keys: Int32Array };

/** The key number of event i, or -1 when it has none. */
export function keyNumber(map: KeyMap, i: number): number {
  switch (map.kind) {
    case 'none':
      return -1;
    case 'modulo':
      return (Math.floor(i / map.publishers) % map.keysPerPublisher) * map.publishers + (i % map.publishers);
    case 'table':
      return map.keys[i] ?? -1;
  }
}

/** The published key string of a key number. */
export const keyString = (n: number): string => `k${n}`;

/** The lane of key number n (src/core/lanes.ts: FNV-1a of the key, modulo 256). */
export const laneOfKey = (n: number): number => laneOf(keyString(n), '');
