/**
 * Durations on the command line (`7d`, `12h`, `1h30m`, `500ms`, or a plain number of
 * milliseconds) and in output (`4.2s`, `3m12s`).
 */

const UNITS: Readonly<Record<string, number>> = Object.freeze({
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
});

const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/y;

/**
 * Parse `7d`, `12h`, `1h30m`, `1.5s`, `250ms`, or digits alone (milliseconds) into whole
 * milliseconds; undefined when `text` is not a duration.
 *
 * ```ts
 * parseDuration('1h30m'); // 5400000
 * ```
 */
export function parseDuration(text: string): number | undefined {
  const trimmed = text.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  if (trimmed.length === 0) return undefined;
  let total = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < trimmed.length) {
    const match = PART.exec(trimmed);
    if (match === null) return undefined;
    total += Number(match[1]) * UNITS[match[2]!]!;
  }
  return Number.isSafeInteger(Math.round(total)) ? Math.round(total) : undefined;
}

/**
 * A short human duration: `850ms`, `4.2s`, `3m12s`, `2h05m`, `3d04h`; a zero remainder is left
 * out (`7d`, `2h`, `5m`).
 *
 * ```ts
 * formatDuration(192_000); // '3m12s'
 * ```
 */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '-';
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1).replace(/\.0$/, '')}s`;
  const two = (big: number, bigUnit: string, small: number, smallUnit: string) =>
    small === 0 ? `${big}${bigUnit}` : `${big}${bigUnit}${String(small).padStart(2, '0')}${smallUnit}`;
  const seconds = Math.floor(ms / 1_000);
  if (seconds < 3_600) return two(Math.floor(seconds / 60), 'm', seconds % 60, 's');
  const minutes = Math.floor(seconds / 60);
  if (minutes < 1_440) return two(Math.floor(minutes / 60), 'h', minutes % 60, 'm');
  const hours = Math.floor(minutes / 60);
  return two(Math.floor(hours / 24), 'd', hours % 24, 'h');
}
