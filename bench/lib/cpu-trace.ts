/**
 * `BENCH_CPU_TRACE=1`: a dispatcher process's CPU per delivery over its drain, slice by slice (the progress ticks, 100
 * ms apart), printed at the end. It shows how much of a short drain's CPU is the process warming up (code not yet
 * optimized, the heap still growing) rather than the steady cost of a delivery. The CPU is the process's, every
 * thread's (V8's compilers and parallel scavenges too), since "go".
 */
export class CpuTrace {
  readonly #since: NodeJS.CpuUsage;
  readonly #samples: { readonly handled: number; readonly cpuMs: number }[] = [];

  constructor(since: NodeJS.CpuUsage) {
    this.#since = since;
  }

  /** A progress tick: `handled` deliveries so far. */
  sample(handled: number): void {
    const used = process.cpuUsage(this.#since);
    this.#samples.push({ handled, cpuMs: (used.user + used.system) / 1000 });
  }

  /** One line per slice that handled deliveries: the deliveries so far, the slice's CPU and its µs per delivery. */
  report(handled: number, who: string): string {
    this.sample(handled);
    const lines = [`[cpu trace ${who}] deliveries so far, CPU ms so far, this slice: deliveries, CPU ms, µs/delivery`];
    let before = { handled: 0, cpuMs: 0 };
    for (const sample of this.#samples) {
      const count = sample.handled - before.handled;
      if (count <= 0) continue;
      const ms = sample.cpuMs - before.cpuMs;
      lines.push(
        `${String(sample.handled).padStart(9)} ${sample.cpuMs.toFixed(0).padStart(7)}   +${String(count).padStart(7)} ${ms.toFixed(0).padStart(6)} ${((1000 * ms) / count).toFixed(1).padStart(7)}`,
      );
      before = sample;
    }
    return lines.join('\n');
  }
}
