/**
 * relaybus is benchmarked from its compiled `dist/` (the peers run compiled JavaScript too; tsx's
 * esbuild helpers cost ~1 µs per delivery). Before a run the orchestrator checks that every
 * source file of the build (tsconfig.build.json: src/ and schema/) has a compiled file at least as
 * new, and runs `npm run build` when one does not. A failed build stops the run: measuring a stale
 * dist/ would report code that is not the source's.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sources(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** Source files whose compiled file in dist/ is missing or older. */
export function staleSources(): string[] {
  const stale: string[] = [];
  for (const dir of ['src', 'schema']) {
    for (const file of sources(join(ROOT, dir))) {
      const rel = relative(ROOT, file);
      const compiled = join(ROOT, 'dist', rel.replace(/\.ts$/, '.js'));
      if (!existsSync(compiled) || statSync(compiled).mtimeMs < statSync(file).mtimeMs) stale.push(rel);
    }
  }
  return stale;
}

function git(args: string[]): string {
  try {
    return execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

export interface BuildInfo {
  /** Whether this run rebuilt dist/. */
  readonly built: boolean;
  readonly commit: string;
  /** Files of src/, schema/ and sql/ that differ from the commit (the measured code is the working tree). */
  readonly uncommitted: readonly string[];
}

/** Build dist/ when a source is newer (or `force`); throws when the build fails. */
export function ensureBuild(log: (line: string) => void, options: { readonly skip?: boolean } = {}): BuildInfo {
  const stale = staleSources();
  let built = false;
  if (stale.length > 0) {
    if (options.skip)
      throw new Error(
        `dist/ is older than ${stale.length} source file(s) (${stale.slice(0, 5).join(', ')}${stale.length > 5 ? ', ...' : ''}) and --no-build was given`,
      );
    log(
      `dist/ is older than ${stale.length} source file(s) (${stale.slice(0, 3).join(', ')}${stale.length > 3 ? ', ...' : ''}): npm run build`,
    );
    try {
      execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
    } catch (error) {
      const e = error as { stdout?: string; stderr?: string; message: string };
      throw new Error(
        `npm run build failed; relaybus cannot be benchmarked from dist/:\n${e.stdout ?? ''}${e.stderr ?? ''}`.slice(
          0,
          4000,
        ),
      );
    }
    built = true;
    const still = staleSources();
    if (still.length > 0) throw new Error(`dist/ still older than ${still.join(', ')} after npm run build`);
  }
  const status = git(['status', '--porcelain', '--', 'src', 'schema', 'sql']);
  return {
    built,
    commit: git(['rev-parse', '--short', 'HEAD']),
    uncommitted: status === 'unknown' || status === '' ? [] : status.split('\n').map((line) => line.slice(3)),
  };
}
