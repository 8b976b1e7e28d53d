/**
 * The guide's site, as `npm run docs:build` makes it (VitePress, from docs/, into a folder of this test's own):
 *
 * - it builds (a dead link between pages fails VitePress itself);
 * - every link of every built page resolves: the page or file exists, and the `#anchor` is an id on it;
 * - no `<!--@include: ... -->` was left unresolved (VitePress leaves a failed include as a silent comment);
 * - every relative link of README.md resolves (to a file of the repository; an anchor to a heading of the target,
 *   by GitHub's slugs), since README.md is read on GitHub and npm, outside the site;
 * - every page opened in headless Chromium renders its heading and content, with no script error.
 *
 * `RELAYBUS_SCREENSHOTS=1` writes docs/public/site.png (the getting-started page).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, extname, join, normalize, relative } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { browserSkip, launchChromium } from '../support/chromium.js';
import { DOCS_ROOT, docPage } from './doc-set.js';

const execFileAsync = promisify(execFile);
const VITEPRESS = join(DOCS_ROOT, 'node_modules/vitepress/bin/vitepress.js');

/** The built site's HTML pages, relative to its root (`guide/workers.html`). */
function htmlPages(root: string, folder = root): string[] {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) return name === 'assets' ? [] : htmlPages(root, path);
    return name.endsWith('.html') ? [relative(root, path).split('\\').join('/')] : [];
  });
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" };
const decodeEntities = (text: string) => text.replace(/&(amp|lt|gt|quot|#39);/g, (_, name: string) => ENTITIES[name]!);

/** The ids of a built page, and its links (`href` of `<a>`, `src` of `<img>`), as written. */
function readPage(html: string): { ids: Set<string>; links: string[] } {
  const ids = new Set([...html.matchAll(/\sid="([^"]+)"/g)].map((match) => decodeEntities(match[1]!)));
  const links = [...html.matchAll(/<(?:a|img)\s[^>]*?(?:href|src)="([^"]*)"/g)].map((match) =>
    decodeEntities(match[1]!),
  );
  return { ids, links };
}

/** The built file a link's path names, from `page` (both relative to the site's root). */
function targetOf(page: string, path: string): string {
  if (path === '') return page;
  const resolved = path.startsWith('/') ? path.slice(1) : join(dirname(page), path);
  const clean = resolved === '' ? '' : normalize(resolved).split('\\').join('/');
  return clean === '' || clean === '.' || clean.endsWith('/') ? `${clean.replace(/^\.$/, '')}index.html` : clean;
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function githubSlug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of a Markdown file's headings (outside code blocks), as GitHub makes them. */
function markdownAnchors(text: string): Set<string> {
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*?)\s*#*$/.exec(line);
    if (heading) anchors.add(githubSlug(heading[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')));
  }
  return anchors;
}

describe('the guide site (VitePress, built from docs/)', () => {
  const out = mkdtempSync(join(tmpdir(), 'relaybus-site-'));
  let built = '';
  before(
    async () => {
      try {
        await execFileAsync(process.execPath, [VITEPRESS, 'build', 'docs', '--outDir', out], {
          cwd: DOCS_ROOT,
          maxBuffer: 16 * 1024 * 1024,
          timeout: 170_000,
        });
      } catch (error) {
        const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
        built = `vitepress build failed: ${(error as Error).message}\n${stdout}${stderr}`;
      }
    },
    { timeout: 180_000 },
  );
  after(() => rmSync(out, { recursive: true, force: true }));

  it('builds', () => {
    assert.equal(built, '');
    assert.ok(existsSync(join(out, 'index.html')), 'the build wrote index.html');
  });

  it('every link and anchor of every page resolves, and every include was found', () => {
    assert.equal(built, '', 'the site built');
    const pages = htmlPages(out);
    assert.ok(pages.length >= 15, `the site has its pages (${pages.length})`);
    const read = new Map(pages.map((page) => [page, readPage(readFileSync(join(out, page), 'utf8'))]));
    const broken: string[] = [];
    for (const [page, { links }] of read) {
      const html = readFileSync(join(out, page), 'utf8');
      if (html.includes('@include')) broken.push(`${page}: an <!--@include: ...--> was not resolved`);
      for (const link of links) {
        if (/^[a-z]+:/i.test(link) || link.startsWith('//')) continue; // https:, mailto:, ...
        const [path = '', anchor] = link.split('#', 2);
        const target = targetOf(page, path);
        const file = extname(target) === '' ? `${target}.html` : target;
        if (!existsSync(join(out, file))) {
          broken.push(`${page}: ${link} (no ${file})`);
          continue;
        }
        if (anchor !== undefined && anchor !== '' && file.endsWith('.html')) {
          const ids = read.get(file)?.ids ?? readPage(readFileSync(join(out, file), 'utf8')).ids;
          if (!ids.has(decodeURIComponent(anchor))) broken.push(`${page}: ${link} (no id "${anchor}" on ${file})`);
        }
      }
    }
    assert.deepEqual(broken, []);
  });

  it("README.md's relative links resolve to files of the repository and to headings of the pages they name", () => {
    const readme = docPage('README.md');
    const broken: string[] = [];
    const lines = readme.text.split('\n');
    let fenced = false;
    lines.forEach((line, index) => {
      if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
      if (fenced) return;
      for (const match of line.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
        const link = match[1]!;
        if (/^[a-z]+:/i.test(link)) continue;
        const [path = '', anchor] = link.split('#', 2);
        const file = path === '' ? join(DOCS_ROOT, 'README.md') : join(DOCS_ROOT, path);
        const at = `README.md:${index + 1}: ${link}`;
        if (!existsSync(file)) broken.push(`${at} (no such file)`);
        else if (anchor && file.endsWith('.md') && !markdownAnchors(readFileSync(file, 'utf8')).has(anchor))
          broken.push(`${at} (no heading with that anchor)`);
      }
    });
    assert.deepEqual(broken, []);
  });

  describe('in headless Chromium', { skip: browserSkip }, () => {
    let server: Server;
    let base = '';
    let browser: Awaited<ReturnType<typeof launchChromium>> | undefined;
    before(async () => {
      server = createServer((request, response) => {
        const path = decodeURIComponent(new URL(request.url ?? '/', 'http://x').pathname);
        const file = join(out, normalize(path.endsWith('/') ? `${path}index.html` : path));
        if (!file.startsWith(out) || !existsSync(file) || statSync(file).isDirectory()) {
          response.writeHead(404).end('not found');
          return;
        }
        const types: Record<string, string> = {
          '.html': 'text/html',
          '.js': 'text/javascript',
          '.css': 'text/css',
          '.png': 'image/png',
          '.svg': 'image/svg+xml',
          '.json': 'application/json',
          '.woff2': 'font/woff2',
        };
        response.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' });
        response.end(readFileSync(file));
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      browser = await launchChromium({ width: 1280, height: 1000 });
    });
    after(async () => {
      await browser?.close();
      await new Promise<void>((resolve) => server?.close(() => resolve()));
    });

    it('every page renders its heading and content, with no script error', { timeout: 120_000 }, async () => {
      assert.equal(built, '', 'the site built');
      const failures: string[] = [];
      const page = await browser!.context.newPage();
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      for (const path of htmlPages(out).filter((name) => name !== '404.html')) {
        errors.length = 0;
        await page.goto(`${base}/${path}`);
        const home = path === 'index.html';
        const heading = home ? '.VPHero .name' : '.vp-doc h1';
        const found = await page.waitForSelector(heading, { timeout: 10_000 }).catch(() => null);
        const text = (await found?.textContent())?.trim() ?? '';
        if (text === '') failures.push(`${path}: no ${heading}`);
        if (!home) {
          const body = (await page.textContent('.vp-doc')) ?? '';
          if (body.trim().length < 200) failures.push(`${path}: the page has almost no content (${body.length} chars)`);
          const sidebarLinks = await page.locator('.VPSidebar a').count();
          if (sidebarLinks < 10) failures.push(`${path}: the sidebar has ${sidebarLinks} links`);
        }
        if (errors.length > 0) failures.push(`${path}: ${errors.join('; ')}`);
      }
      assert.deepEqual(failures, []);
    });

    it('the getting-started page shows the quick start, with its commands and code', async () => {
      const page = await browser!.context.newPage();
      await page.goto(`${base}/guide/getting-started.html`);
      await page.waitForSelector('.vp-doc h1');
      const text = (await page.textContent('.vp-doc')) ?? '';
      for (const expected of ['Quick start', 'npx relaybus setup', 'npx relaybus worker', 'createRelayBus'])
        assert.ok(text.includes(expected), `the page shows "${expected}"`);
      assert.ok(
        (await page.locator('.vp-doc div[class*="language-"]').count()) >= 4,
        'its code blocks are highlighted',
      );
      if (process.env.RELAYBUS_SCREENSHOTS)
        await page.screenshot({ path: join(DOCS_ROOT, 'docs/public/site.png'), fullPage: false });
    });
  });
});
