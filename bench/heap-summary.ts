/**
 * The functions that allocate the most in a heap profile written under BENCH_HEAP_SAMPLE (bench/lib/heap-sample.cjs):
 * bytes allocated in each (self), and its share.
 *
 *   node --import tsx bench/heap-summary.ts <file.heapprofile> [top=30]
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly selfSize: number;
  readonly children: readonly ProfileNode[];
}

const [file, topArg] = process.argv.slice(2);
if (file === undefined) {
  console.error('usage: node --import tsx bench/heap-summary.ts <file.heapprofile> [top=30]');
  process.exit(2);
}
const { head } = JSON.parse(readFileSync(file, 'utf8')) as { head: ProfileNode };
const bytes = new Map<string, number>();
let total = 0;
const stack: ProfileNode[] = [head];
while (stack.length > 0) {
  const node = stack.pop()!;
  const { functionName, url, lineNumber } = node.callFrame;
  const name = `${functionName || '(anonymous)'} ${url.split('/').slice(-2).join('/')}:${lineNumber + 1}`;
  bytes.set(name, (bytes.get(name) ?? 0) + node.selfSize);
  total += node.selfSize;
  stack.push(...node.children);
}
console.log(`${(total / 1e6).toFixed(1)} MB sampled`);
for (const [name, size] of [...bytes].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg ?? 30)))
  console.log(`${(size / 1e6).toFixed(1).padStart(8)} MB ${((100 * size) / total).toFixed(1).padStart(5)}%  ${name}`);
