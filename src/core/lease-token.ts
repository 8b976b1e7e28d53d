import { InvalidLeaseError } from './errors.js';
import { isLane } from './lanes.js';

/**
 * A lease token `lane:epoch:claims` proves which claim of a delivery a worker holds: the lane, the
 * lane's epoch when it was claimed (bumped whenever the lane changes hands) and the delivery's
 * `claims` counter (bumped whenever a claim of it ends without completion). This module is the only
 * place that knows the format.
 */
export interface LeaseTokenParts {
  readonly lane: number;
  /** Decimal string: epochs are int8 in Postgres and may exceed 2^53. */
  readonly epoch: string;
  readonly claims: number;
}

const TOKEN = /^(\d{1,3}):(\d{1,19}):(\d{1,10})$/;

/**
 * Whether epoch `a` is later than epoch `b`, both as `parseLeaseToken` gives them (decimal strings without leading
 * zeros; int8 values, so compared as text by length first, with no BigInt made per comparison).
 */
export function isLaterEpoch(a: string, b: string): boolean {
  return a.length === b.length ? a > b : a.length > b.length;
}

/** Render the token of a claim. */
export function formatLeaseToken(parts: LeaseTokenParts): string {
  return `${parts.lane}:${parts.epoch}:${parts.claims}`;
}

/**
 * Tokens parsed lately, and their parts (frozen, so one object can be handed to every caller). Every delivery of a lane
 * claimed at one epoch and never claimed before shares one token, and each is parsed twice (when its run starts and
 * when its completion is written): a regular expression and a BigInt per delivery were a visible share of the
 * dispatcher's time. Cleared when full, which bounds it.
 */
const parsedTokens = new Map<string, LeaseTokenParts>();
const PARSED_TOKENS_KEPT = 4_096;

/** Parse a token; throws `InvalidLeaseError` when it is not `lane:epoch:claims` with a lane in 0..255. */
export function parseLeaseToken(token: unknown): LeaseTokenParts {
  if (typeof token !== 'string') {
    throw new InvalidLeaseError(
      `A lease token must be a string "lane:epoch:claims", got ${typeof token}. Pass the lease of a claimed delivery unchanged.`,
    );
  }
  return parsedTokens.get(token) ?? parseNewToken(token);
}

function parseNewToken(token: string): LeaseTokenParts {
  const match = TOKEN.exec(token);
  if (!match) {
    throw new InvalidLeaseError(
      `Malformed lease token "${token}": expected "lane:epoch:claims" (three non-negative integers). Pass the lease of a claimed delivery unchanged.`,
    );
  }
  const lane = Number(match[1]);
  if (!isLane(lane)) {
    throw new InvalidLeaseError(`Malformed lease token "${token}": lane ${lane} is outside 0..255.`);
  }
  const claims = Number(match[3]);
  if (claims > 2_147_483_647) {
    throw new InvalidLeaseError(`Malformed lease token "${token}": claims ${claims} is out of range.`);
  }
  const parts = Object.freeze({ lane, epoch: BigInt(match[2]!).toString(), claims });
  if (parsedTokens.size >= PARSED_TOKENS_KEPT) parsedTokens.clear();
  parsedTokens.set(token, parts);
  return parts;
}
