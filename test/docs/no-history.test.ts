/**
 * User documents describe the present. README.md, the guide's pages, and the comments of src/ and sql/ carry no
 * project history (dates, commit hashes, issue numbers) and no benchmark figures outside the tables bench/readme.ts
 * generates (between `<!-- bench:start -->` and `<!-- bench:end -->`, with the run's machine line). Code blocks are
 * exempt: an example's timestamp is not history.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { DOCS_ROOT, docPages } from './doc-set.js';

/** What history looks like in prose: each a pattern and what it found. */
const HISTORY: readonly (readonly [RegExp, string])[] = [
  [/\b20\d\d-[01]\d-[0-3]\d\b/, 'a date'],
  [/\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\b/, 'a commit hash'],
  [/\bissue #?\d+\b/i, 'an issue number'],
  [/\b(?:in|of) the runs? (?:of|before|below|above)\b/i, 'a reference to a past run'],
];

/** Benchmark figures: a ratio like `1.31x`, a CPU cost in µs. */
const FIGURES: readonly (readonly [RegExp, string])[] = [
  [/\b\d+\.\d+x\b/, 'a ratio'],
  [/\d\s?µs\b/, 'a CPU figure'],
];

/** The prose lines of a page: outside code blocks and generated sections, with their line numbers. */
function proseLines(text: string): { line: number; text: string }[] {
  const lines: { line: number; text: string }[] = [];
  let fenced = false;
  let generated = false;
  text.split('\n').forEach((line, index) => {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    else if (line.includes('<!-- bench:start')) generated = true;
    else if (line.includes('<!-- bench:end')) generated = false;
    else if (!fenced && !generated) lines.push({ line: index + 1, text: line.replace(/`[^`]*`/g, '``') });
  });
  return lines;
}

function filesUnder(folder: string, extensions: readonly string[]): string[] {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) return filesUnder(path, extensions);
    return extensions.some((extension) => name.endsWith(extension)) ? [path] : [];
  });
}

/** The comment lines of a TypeScript or SQL file (`//`, `/* ... *\/` blocks, `--`). */
function commentLines(text: string): { line: number; text: string }[] {
  const lines: { line: number; text: string }[] = [];
  let block = false;
  text.split('\n').forEach((line, index) => {
    const trimmed = line.trim();
    if (block || trimmed.startsWith('/*')) {
      lines.push({ line: index + 1, text: line });
      block = !trimmed.includes('*/');
    } else {
      const comment = /(?:^|\s)(?:\/\/|--)\s(.*)$/.exec(line);
      if (comment) lines.push({ line: index + 1, text: comment[1]! });
    }
  });
  return lines;
}

function findings(
  where: string,
  lines: readonly { line: number; text: string }[],
  patterns: readonly (readonly [RegExp, string])[],
): string[] {
  return lines.flatMap(({ line, text }) =>
    patterns
      .filter(([pattern]) => pattern.test(text))
      .map(([pattern, what]) => `${where}:${line}: ${what} (${pattern.exec(text)![0]})`),
  );
}

describe('user documents describe the present', () => {
  it('README.md and the guide carry no history, and figures only on the performance page and in generated tables', () => {
    const found = docPages().flatMap((page) => {
      const prose = proseLines(page.text);
      const patterns = page.path === 'docs/guide/performance.md' ? HISTORY : [...HISTORY, ...FIGURES];
      const long = prose
        .filter(({ text }) => text.length > 400 && !text.trimStart().startsWith('|'))
        .map(({ line, text }) => `${page.path}:${line}: a prose line of ${text.length} characters`);
      return [...findings(page.path, prose, patterns), ...long];
    });
    assert.deepEqual(found, []);
  });

  it('the comments of src/ and sql/ carry no history and no benchmark figures', () => {
    const found = ['src', 'sql'].flatMap((folder) =>
      filesUnder(join(DOCS_ROOT, folder), ['.ts', '.sql']).flatMap((file) =>
        findings(relative(DOCS_ROOT, file), commentLines(readFileSync(file, 'utf8')), [...HISTORY, ...FIGURES]),
      ),
    );
    assert.deepEqual(found, []);
  });
});
