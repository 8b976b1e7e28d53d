/**
 * The README's quick start as a list of steps, in the README's order: files to write (`ts` blocks
 * with `file=`), environment exports, npm installs into the project, the build of relaybus's
 * tarball in its clone (`npm ci && npm pack`), `relaybus` invocations, and other shell lines that
 * run as written. A step this module cannot classify is an error, so the quick start cannot grow a
 * step the flow test (test/flows/quick-start.test.ts) ignores.
 */
import type { CodeBlock } from './markdown.js';
import { invocationsInShell, type Invocation } from './commands.js';

export type Step =
  | { readonly kind: 'file'; readonly line: number; readonly name: string; readonly code: string }
  | { readonly kind: 'env'; readonly line: number; readonly name: string; readonly value: string }
  | { readonly kind: 'install'; readonly line: number; readonly text: string }
  | { readonly kind: 'build'; readonly line: number; readonly text: string }
  | { readonly kind: 'relaybus'; readonly line: number; readonly invocation: Invocation; readonly text: string }
  | { readonly kind: 'shell'; readonly line: number; readonly text: string };

const SHELL = new Set(['sh', 'bash', 'shell']);
/** An npm install into the project: the flow test runs it as written, npm served from the local cache. */
const INSTALL = /^npm (install|i)\b/;
/** The build of relaybus's package in its clone: the flow test builds the same tarball from this repository. */
const BUILD = /\bnpm pack\b/;

/** The steps of the code blocks of one README section, in order. */
export function quickStartSteps(blocks: readonly CodeBlock[]): Step[] {
  const steps: Step[] = [];
  for (const block of blocks) {
    if (block.lang === 'ts') {
      if (block.marker?.skip !== undefined) continue;
      if (block.marker?.file === undefined)
        throw new Error(
          `README.md:${block.line}: a quick-start ts block needs a file= marker (the name the reader saves it as)`,
        );
      steps.push({ kind: 'file', line: block.line, name: block.marker.file, code: block.code });
      continue;
    }
    if (!SHELL.has(block.lang))
      throw new Error(
        `README.md:${block.line}: the quick-start runner does not know how to run a ${block.lang || 'plain'} block`,
      );
    block.code.split('\n').forEach((text, index) => {
      const line = block.line + 1 + index;
      const command = text.replace(/(^|\s)#.*$/, '').trim();
      if (command === '') return;
      const exported = /^export\s+([A-Z_][A-Z0-9_]*)=(\S*)$/.exec(command);
      if (exported) {
        steps.push({ kind: 'env', line, name: exported[1]!, value: exported[2]! });
        return;
      }
      if (BUILD.test(command)) {
        steps.push({ kind: 'build', line, text: command });
        return;
      }
      if (INSTALL.test(command)) {
        steps.push({ kind: 'install', line, text: command });
        return;
      }
      const invocations = invocationsInShell(command);
      if (invocations.length > 1 || (invocations.length === 1 && /&&|\|\||[;|]/.test(command))) {
        throw new Error(
          `README.md:${line}: write a relaybus command on a line of its own in the quick start: ${command}`,
        );
      }
      if (invocations.length === 1) steps.push({ kind: 'relaybus', line, invocation: invocations[0]!, text: command });
      else steps.push({ kind: 'shell', line, text: command });
    });
  }
  return steps;
}
