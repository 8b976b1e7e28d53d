/**
 * BENCH_PERF=<path>: `perf record -a -g` over the timed window of each drain (from just before "go" to the end of the
 * drain), written to `<path>.<epoch ms>`, to see where the machine's CPU went: which process (`perf report --sort comm`),
 * and inside Postgres whether execution, planning or parsing (`perf report --comm postgres --children`). System-wide, so
 * the dispatchers, their backends and everything else on the machine show side by side. Diagnosis only: sampling costs
 * a little CPU, so figures of such a run are not comparable with others.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { sleep } from './stats.js';

/** perf needs a moment to set up its buffers before it samples. */
const PERF_START_MS = 300;

/**
 * Start recording when BENCH_PERF is set; the function returned stops it (once: later calls wait for the same stop, so a
 * `finally` may call it again). Without perf, warns and records nothing.
 */
export async function startPerfRecord(log: (line: string) => void): Promise<() => Promise<void>> {
  const prefix = process.env.BENCH_PERF;
  if (!prefix) return async () => {};
  const output = `${prefix}.${Date.now()}`;
  const perf = spawn('perf', ['record', '-a', '-g', '-F', '1999', '-o', output], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => {
    perf.once('exit', () => resolve());
    perf.once('error', (error) => {
      log(`BENCH_PERF: perf could not start (${error.message}); nothing recorded`);
      resolve();
    });
  });
  await sleep(PERF_START_MS);
  let stopped: Promise<void> | undefined;
  return () =>
    (stopped ??= (async () => {
      if (perf.exitCode === null && perf.pid !== undefined) perf.kill('SIGINT');
      await exited;
      if (existsSync(output)) log(`BENCH_PERF: recorded ${output}`);
    })());
}
