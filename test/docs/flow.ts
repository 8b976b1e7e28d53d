/**
 * What the tests of test/flows/ share to follow a README flow as a user does: the README's blocks (from the file
 * `RELAYBUS_README` names, to watch a flow fail on another copy), shell lines run in the project with the user's
 * environment (npm served from the local cache), and a worker started from the project's own installed bin.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { REPO_ROOT, run, userEnv } from '../support/packed-package.js';
import { type CodeBlock, parseReadme, type ReadmeParts } from './markdown.js';

export const README_PATH = process.env.RELAYBUS_README ?? join(REPO_ROOT, 'README.md');
export const README_TEXT = readFileSync(README_PATH, 'utf8');
export const README: ReadmeParts = parseReadme(README_TEXT);

/** npm as the flows run it: from the local cache (which `npm ci` filled), quietly. */
export const NPM_FROM_CACHE = {
  NPM_CONFIG_PREFER_OFFLINE: 'true',
  NPM_CONFIG_AUDIT: 'false',
  NPM_CONFIG_FUND: 'false',
  NPM_CONFIG_LOGLEVEL: 'error',
} as const;

/** The code blocks of one `##` section, in order. */
export function sectionBlocks(section: string): CodeBlock[] {
  const blocks = README.blocks.filter((block) => block.section === section);
  assert.ok(blocks.length > 0, `${README_PATH} has a section "${section}" with code blocks`);
  return blocks;
}

/** The block the README saves as `file` (its `<!-- snippet: file=... -->` marker). */
export function fileBlock(file: string): CodeBlock {
  const block = README.blocks.find((b) => b.marker?.file === file);
  assert.ok(block, `${README_PATH} has a block saved as ${file}`);
  return block;
}

/** The single block of `lang` in `section` that has a line matching `pattern`. */
export function blockWith(section: string, lang: string, pattern: RegExp): CodeBlock {
  const found = sectionBlocks(section).filter((block) => block.lang === lang && pattern.test(block.code));
  assert.equal(found.length, 1, `one ${lang} block in "${section}" matches ${pattern}`);
  return found[0]!;
}

/** The shell commands of a block: its non-empty lines, comments cut off. */
export function commandsOf(block: CodeBlock): { line: number; text: string }[] {
  return block.code
    .split('\n')
    .map((text, index) => ({ line: block.line + 1 + index, text: text.replace(/(^|\s)#.*$/, '').trim() }))
    .filter((command) => command.text !== '');
}

/** What the README says, in `section`, that the worker prints: "... prints `<text>`". */
export function printedClaims(section: string): string[] {
  const start = README_TEXT.indexOf(`## ${section}`);
  assert.ok(start >= 0, `${README_PATH} has a section "${section}"`);
  const end = README_TEXT.indexOf('\n## ', start + 1);
  const text = README_TEXT.slice(start, end < 0 ? undefined : end);
  return [...text.matchAll(/prints `([^`]+)`/g)].map((match) => match[1]!);
}

/** Run one shell line of the README in `cwd`, as a user's shell does; fails with the README line and the output. */
export async function shell(
  command: { line: number; text: string },
  cwd: string,
  env: Record<string, string | undefined>,
): Promise<string> {
  try {
    return await run('/bin/sh', ['-c', command.text], cwd, { ...NPM_FROM_CACHE, ...env }, 90_000);
  } catch (error) {
    assert.fail(`README.md:${command.line}: \`${command.text}\` failed: ${(error as Error).message}`);
  }
}

/** A worker started from a project's installed bin. */
export interface Worker {
  readonly child: ChildProcess;
  output(): string;
  /** Resolves when the output matches `pattern`; fails when the worker exits first or after `timeoutMs`. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** SIGTERM, then the exit code and output (SIGKILL after 20 s). */
  stop(): Promise<{ code: number | null; output: string }>;
  /** The exit code and output once the worker exits by itself (`--once`); SIGKILL after 90 s. */
  readonly exited: Promise<{ code: number | null; output: string }>;
}

/**
 * `relaybus <args>` from the project's node_modules/.bin: what `npx relaybus` runs, without npx in between (the
 * README says why a supervisor runs the bin directly: npx does not wait for the worker on SIGTERM).
 */
export function startWorker(project: string, args: readonly string[], env: Record<string, string | undefined>): Worker {
  const child = spawn(join(project, 'node_modules/.bin/relaybus'), [...args], {
    cwd: project,
    env: userEnv(env) as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const killer = setTimeout(() => child.kill('SIGKILL'), 90_000);
  exited.finally(() => clearTimeout(killer));
  return {
    child,
    output: () => output,
    async waitFor(pattern, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (!pattern.test(output)) {
        if (child.exitCode !== null || child.signalCode !== null)
          assert.fail(
            `the worker exited (${child.exitCode ?? child.signalCode}) before printing ${pattern}:\n${output}`,
          );
        if (Date.now() > deadline) assert.fail(`the worker did not print ${pattern} in ${timeoutMs} ms:\n${output}`);
        await sleep(50);
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const stopper = setTimeout(() => child.kill('SIGKILL'), 20_000);
      const code = await exited;
      clearTimeout(stopper);
      return { code, output };
    },
    exited: exited.then((code) => ({ code, output })),
  };
}
