/**
 * Deliveries are partitioned into 256 lanes; workers lease lanes, never delivery rows. A delivery's
 * lane is FNV-1a (32-bit) of the UTF-8 bytes of its ordering key, or of its event id when it has
 * none, modulo 256. Every store computes it here, so a key lands in the same lane everywhere.
 */
export const LANE_COUNT = 256;

const FNV_OFFSET_BASIS = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const encoder = new TextEncoder();

/** FNV-1a 32-bit hash of a string's UTF-8 bytes, as an unsigned integer. */
export function fnv1a32(text: string): number {
  let hash = FNV_OFFSET_BASIS;
  for (const byte of encoder.encode(text)) {
    hash ^= byte;
    hash = Math.imul(hash, FNV_PRIME);
  }
  return hash >>> 0;
}

/** The lane (0..255) of a delivery: from its ordering key when it has one, else from its event id. */
export function laneOf(key: string | null | undefined, eventId: string): number {
  return fnv1a32(key ?? eventId) % LANE_COUNT;
}

/** True for an integer lane number in 0..255. */
export function isLane(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 0 && (value as number) < LANE_COUNT;
}
