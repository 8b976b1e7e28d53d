/**
 * The documentation as the doc tests read it: README.md and every page of the guide under docs/ (the site's
 * theme folder and generated API pages aside). `RELAYBUS_DOCS_ROOT=<folder>` reads another copy (a folder with its
 * own README.md and docs/), to watch a test fail on a broken page.
 *
 * Code blocks saved under a name (`<!-- snippet: file=<name> -->`) are named once across the whole set: a flow
 * test asks for `fileBlock('relaybus.config.ts')` wherever the page that shows it is.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CodeBlock, type PageParts, parseMarkdown } from './markdown.js';

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const DOCS_ROOT = process.env.RELAYBUS_DOCS_ROOT ?? REPO_ROOT;

/** Folders under docs/ that hold no hand-written page. */
const NOT_PAGES = new Set(['.vitepress', 'public', 'node_modules', 'api']);

/** One Markdown page and what the doc tests read from it. */
export interface DocPage {
  /** Relative to the repository, with forward slashes: `README.md`, `docs/guide/workers.md`. */
  readonly path: string;
  readonly text: string;
  readonly parts: PageParts;
}

function pagesUnder(folder: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      if (!NOT_PAGES.has(entry.name)) found.push(...pagesUnder(join(folder, entry.name)));
    } else if (entry.name.endsWith('.md')) {
      found.push(join(folder, entry.name));
    }
  }
  return found;
}

let cached: DocPage[] | undefined;

/** README.md, then the pages under docs/ in path order. */
export function docPages(): readonly DocPage[] {
  if (cached === undefined) {
    const files = [join(DOCS_ROOT, 'README.md'), ...pagesUnder(join(DOCS_ROOT, 'docs')).sort()];
    cached = files.map((file) => {
      const path = relative(DOCS_ROOT, file).split('\\').join('/');
      const text = readFileSync(file, 'utf8');
      return { path, text, parts: parseMarkdown(text, path) };
    });
  }
  return cached;
}

/** The page at `path` (relative to the repository). */
export function docPage(path: string): DocPage {
  const page = docPages().find((candidate) => candidate.path === path);
  assert.ok(page, `the documentation has a page ${path}`);
  return page;
}

/** Every code block of every page. */
export function allBlocks(): CodeBlock[] {
  return docPages().flatMap((page) => page.parts.blocks);
}

/** The block saved as `file` (its `<!-- snippet: file=... -->` marker), on whichever page shows it. */
export function fileBlock(file: string): CodeBlock {
  const blocks = allBlocks().filter((block) => block.marker?.file === file);
  assert.equal(blocks.length, 1, `one page of the documentation has a block saved as ${file}`);
  return blocks[0]!;
}
