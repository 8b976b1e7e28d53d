import type { OutputStream } from './command.js';

/**
 * A progress bar for the demo: redrawn in place at most every `intervalMs` on a TTY; elsewhere (a
 * pipe, a CI log) a plain line at each quarter, so logs stay short.
 */

/** A running progress display. */
export interface Progress {
  /** Report `done` of `total`, with a short suffix (counters). */
  update(done: number, suffix?: string): void;
  /** Draw the final state and end the line. */
  finish(suffix?: string): void;
}

const BAR_WIDTH = 30;

/**
 * Create a progress display on `stream`.
 *
 * ```ts
 * const progress = createProgress(process.stdout, 'delivering', 9000);
 * progress.update(4500, 'retries 3');
 * progress.finish();
 * ```
 */
export function createProgress(stream: OutputStream, label: string, total: number, intervalMs = 100): Progress {
  const started = performance.now();
  let lastDraw = 0;
  let lastQuarter = 0;
  let done = 0;
  let suffix = '';
  const columns = stream.columns !== undefined && stream.columns >= 40 ? stream.columns : 80;
  // Fixed for the whole run so the bar does not jump; room is kept for the counters and the time.
  const barWidth = stream.isTTY
    ? Math.max(10, Math.min(BAR_WIDTH, columns - label.length - 2 * total.toLocaleString('en-US').length - 40))
    : BAR_WIDTH;
  const line = (): string => {
    const ratio = total === 0 ? 1 : Math.min(1, done / total);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const rest = ` ${done.toLocaleString('en-US')}/${total.toLocaleString('en-US')}${suffix ? `  ${suffix}` : ''}  ${seconds} s`;
    const filled = Math.round(ratio * barWidth);
    return `  ${label} [${'#'.repeat(filled)}${'.'.repeat(barWidth - filled)}]${rest}`;
  };
  const draw = (): void => {
    const text = line();
    stream.write(`\r${text.length >= columns ? text.slice(0, columns - 1) : text}\x1b[K`);
  };
  return {
    update(value, text = suffix) {
      done = value;
      suffix = text;
      if (stream.isTTY) {
        const now = performance.now();
        if (now - lastDraw >= intervalMs) {
          lastDraw = now;
          draw();
        }
        return;
      }
      const quarter = total === 0 ? 4 : Math.floor((4 * done) / total);
      if (quarter > lastQuarter && quarter < 4) {
        lastQuarter = quarter;
        stream.write(line() + '\n');
      }
    },
    finish(text = suffix) {
      suffix = text;
      if (stream.isTTY) {
        draw();
        stream.write('\n');
      } else {
        stream.write(line() + '\n');
      }
    },
  };
}
