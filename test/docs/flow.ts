/**
 * What the tests of test/flows/ share to follow a documented flow as a user does: the blocks of a page
 * (test/docs/doc-set.ts: `RELAYBUS_DOCS_ROOT` reads another copy, to watch a flow fail on it), shell lines run in the
 * project with the user's environment (npm served from the local cache), and a worker started from the project's own
 * installed bin.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { run, userEnv } from '../support/packed-package.js';
import { docPage } from './doc-set.js';
import type { CodeBlock } from './markdown.js';

export { fileBlock } from './doc-set.js';

/** npm as the flows run it: from the local cache (which `npm ci` filled), quietly. */
export const NPM_FROM_CACHE = {
  NPM_CONFIG_PREFER_OFFLINE: 'true',
  NPM_CONFIG_AUDIT: 'false',
  NPM_CONFIG_FUND: 'false',
  NPM_CONFIG_LOGLEVEL: 'error',
} as const;

/** The code blocks of one `##` section of `page`, in order. */
export function sectionBlocks(page: string, section: string): CodeBlock[] {
  const blocks = docPage(page).parts.blocks.filter((block) => block.section === section);
  assert.ok(blocks.length > 0, `${page} has a section "${section}" with code blocks`);
  return blocks;
}

/** The single block of `lang` on `page` that has a line matching `pattern`. */
export function blockWith(page: string, lang: string, pattern: RegExp): CodeBlock {
  const found = docPage(page).parts.blocks.filter((block) => block.lang === lang && pattern.test(block.code));
  assert.equal(found.length, 1, `one ${lang} block of ${page} matches ${pattern}`);
  return found[0]!;
}

/** The shell commands of a block: its non-empty lines, comments cut off. */
export function commandsOf(block: CodeBlock): { line: number; text: string; page: string }[] {
  return block.code
    .split('\n')
    .map((text, index) => ({
      line: block.line + 1 + index,
      text: text.replace(/(^|\s)#.*$/, '').trim(),
      page: block.page,
    }))
    .filter((command) => command.text !== '');
}

/** What `page` says (in `section`, when given) that the worker prints: "... prints `<text>`". */
export function printedClaims(page: string, section?: string): string[] {
  let text = docPage(page).text;
  if (section !== undefined) {
    const start = text.indexOf(`## ${section}`);
    assert.ok(start >= 0, `${page} has a section "${section}"`);
    const end = text.indexOf('\n## ', start + 1);
    text = text.slice(start, end < 0 ? undefined : end);
  }
  return [...text.matchAll(/prints `([^`]+)`/g)].map((match) => match[1]!);
}

/** Run one shell line of a page in `cwd`, as a user's shell does; fails with the page's line and the output. */
export async function shell(
  command: { line: number; text: string; page?: string },
  cwd: string,
  env: Record<string, string | undefined>,
): Promise<string> {
  try {
    return await run('/bin/sh', ['-c', command.text], cwd, { ...NPM_FROM_CACHE, ...env }, 90_000);
  } catch (error) {
    assert.fail(
      `${command.page ?? 'README.md'}:${command.line}: \`${command.text}\` failed: ${(error as Error).message}`,
    );
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
