import { laneOf } from '../../src/core/lanes.js';

/** `count` distinct keys `<prefix>-<i>` that fall into `lane` (the lane of an ordering key, as publish computes it). */
export function keysInLane(lane: number, prefix: string, count: number): string[] {
  const keys: string[] = [];
  for (let i = 0; keys.length < count; i += 1) if (laneOf(`${prefix}-${i}`, '') === lane) keys.push(`${prefix}-${i}`);
  return keys;
}
