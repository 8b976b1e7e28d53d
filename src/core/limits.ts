/**
 * The longest name relaybus stores: event types, handler names, event ids and keys. One limit for all of them, so a
 * name `defineEvent` or `bus.on` accepts is never refused by a store (and the SQL function checks the same).
 */
export const MAX_NAME_LENGTH = 200;

/** The longest `ClaimParams.retryLookaheadMs`: how early a retried head may be claimed (it still starts when due). */
export const MAX_RETRY_LOOKAHEAD_MS = 1_000;

/** Most followers a claim may bring with each keyed head (`ClaimParams.followers`, the dispatcher's `followers`). */
export const MAX_FOLLOWERS = 100;

/** Most claim loops a dispatcher runs (`DispatcherOptions.claimLoops`); a claim names the others as its siblings. */
export const MAX_CLAIM_LOOPS = 8;

/** Longest excerpt of a bad value repeated in an error message. */
const MAX_ECHO_LENGTH = 60;

/** A bad value as an error message shows it: long strings cut, with their length. */
export function echo(value: unknown): string {
  if (typeof value === 'string' && value.length > MAX_ECHO_LENGTH) {
    return `a string of ${value.length} characters (${JSON.stringify(value.slice(0, MAX_ECHO_LENGTH))}...)`;
  }
  if (typeof value === 'bigint') return `${value}n`;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    text = undefined; // a cycle
  }
  text ??= String(value);
  return text.length > MAX_ECHO_LENGTH * 2 ? `${text.slice(0, MAX_ECHO_LENGTH * 2)}...` : text;
}

/**
 * Why `value` cannot be a name (`what` says which: "the handler name", "events[2].type"), or undefined when it can:
 * a non-empty string of at most `MAX_NAME_LENGTH` characters.
 */
export function nameProblem(value: unknown, what: string): string | undefined {
  if (typeof value === 'string' && value.length > 0 && value.length <= MAX_NAME_LENGTH) return undefined;
  return `${what} must be a non-empty string of at most ${MAX_NAME_LENGTH} characters, got ${echo(value)}.`;
}
