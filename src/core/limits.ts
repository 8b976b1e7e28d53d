/**
 * The longest name relaybus stores: event types, handler names, event ids and keys. One limit for all of them, so a
 * name `defineEvent` or `bus.on` accepts is never refused by a store. Counted in Unicode code points, as Postgres
 * counts `length(text)`, so `relaybus_publish` in SQL accepts and refuses exactly the names TypeScript does (an emoji
 * is one character to both, not two UTF-16 units).
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

/** The number of code points of `text` (a lone surrogate counts as one, as Postgres stores it: one U+FFFD). */
export function codePointLength(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i += 1) {
    const unit = text.charCodeAt(i);
    // A high surrogate followed by a low one is one code point: skip the low one.
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i += 1;
    }
    count += 1;
  }
  return count;
}

/** At most `units` UTF-16 units of `text`, never ending in the first half of a surrogate pair. */
function cut(text: string, units: number): string {
  if (text.length <= units) return text;
  const last = text.charCodeAt(units - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? units - 1 : units);
}

/**
 * A bad value as an error message shows it: long strings cut (never inside a surrogate pair), with their length in
 * characters (code points, as the limits count them).
 */
export function echo(value: unknown): string {
  if (typeof value === 'string' && value.length > MAX_ECHO_LENGTH) {
    return `a string of ${codePointLength(value)} characters (${JSON.stringify(cut(value, MAX_ECHO_LENGTH))}...)`;
  }
  if (typeof value === 'bigint') return `${value}n`;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    text = undefined; // a cycle
  }
  text ??= String(value);
  return text.length > MAX_ECHO_LENGTH * 2 ? `${cut(text, MAX_ECHO_LENGTH * 2)}...` : text;
}

/** Whether `text` holds a lone surrogate (half of a pair): no database stores it (the drivers send U+FFFD instead). */
function hasLoneSurrogate(text: string): boolean {
  return !(text as string & { isWellFormed(): boolean }).isWellFormed();
}

/**
 * Why `value` cannot be a name (`what` says which: "the handler name", "events[2].type"), or undefined when it can:
 * a non-empty string of at most `MAX_NAME_LENGTH` code points, with no lone surrogate. Code points are counted only
 * when the UTF-16 length is over the limit (it is never below the code point count), so the usual name costs one
 * comparison and one well-formedness check.
 */
export function nameProblem(value: unknown, what: string): string | undefined {
  if (typeof value === 'string' && value.length > 0) {
    if (value.length <= MAX_NAME_LENGTH || codePointLength(value) <= MAX_NAME_LENGTH) {
      if (!hasLoneSurrogate(value)) return undefined;
      return `${what} must not contain a lone surrogate (half of a UTF-16 pair), which Postgres cannot store (it would become U+FFFD and match another name), got ${echo(value)}.`;
    }
  }
  return `${what} must be a non-empty string of at most ${MAX_NAME_LENGTH} characters, got ${echo(value)}.`;
}

/**
 * Delivery ids a replay step looks at for live traffic waiting (`ReplayStepResult.liveWaits`): the newest this many, a
 * second or more of a busy store's deliveries (the Postgres store reads them through the primary key in a millisecond
 * or two). When the workers fall behind, the newest deliveries wait too.
 */
export const LIVE_WAIT_IDS = 10_000;
