/** Re-render bench/results/<name>.md and .svg from <name>.json: `node --import tsx bench/rerender.ts quick`. */
import { readFileSync } from 'node:fs';
import { writeReport, type BenchResults } from './report.js';

const name = process.argv[2] ?? 'quick';
const dir = new URL('./results/', import.meta.url);
const results = JSON.parse(readFileSync(new URL(`./${name}.json`, dir), 'utf8')) as BenchResults;
console.log(writeReport(results, dir).join('\n'));
