import { existsSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Logger, RelayBus, StopOptions } from '../index.js';
import { CliFailure, UsageError } from './command.js';

/**
 * `relaybus worker [config]` loads the user's config module: an ES module whose default export is
 * the bus (`export default createRelayBus({ ... })`), the same module the application imports to
 * publish. `.js` and `.mjs` load as they are; `.ts` loads through tsx when it is installed (its
 * `register()` API, resolved from the CLI or from the config's folder).
 */

/** Config file names tried in the working directory when no path is given, in this order. */
export const DEFAULT_CONFIG_NAMES = ['relaybus.config.ts', 'relaybus.config.js', 'relaybus.config.mjs'] as const;

const JS_EXTENSIONS = new Set(['.js', '.mjs']);
const TS_EXTENSIONS = new Set(['.ts', '.mts']);

/** What the worker passes to `bus.start()` for its flags; honoured by buses that expose `handlers`. */
export interface WorkerStartOptions {
  /** Run only these handlers. */
  readonly handlers?: readonly string[];
  /** Dispatcher settings for this run, over the config's. */
  readonly dispatcher?: {
    readonly concurrency?: number;
    readonly batchSize?: number;
    readonly pollIntervalMs?: number;
    readonly leaseDurationMs?: number;
  };
  /** Where this run's setup and dispatcher log (relaybus versions without it ignore it). */
  readonly logger?: Logger;
}

/**
 * The bus as the worker sees it. `handlers` and `start(options)` are the per-run overrides; a bus
 * without a `handlers` list cannot take them (the flags are then refused rather than ignored).
 */
export interface WorkerBus extends Pick<RelayBus<unknown>, 'lifecycle' | 'store' | 'state' | 'owner'> {
  readonly handlers?: readonly string[];
  start(options?: WorkerStartOptions): Promise<void>;
  stop(options?: StopOptions): Promise<void>;
}

/** True when `bus.start(options)` honours the worker's per-run flags. */
export function acceptsStartOptions(bus: WorkerBus): bus is WorkerBus & { readonly handlers: readonly string[] } {
  return Array.isArray(bus.handlers);
}

/** Find the config file: `path` relative to `cwd`, or the first `relaybus.config.{ts,js,mjs}` there. */
export function resolveConfigPath(path: string | undefined, cwd: string): string {
  if (path !== undefined) {
    const absolute = resolve(cwd, path);
    if (!existsSync(absolute) || !statSync(absolute).isFile()) {
      throw new UsageError(
        `config module not found: ${path} (relaybus worker <config>: a module whose default export is the bus)`,
      );
    }
    return absolute;
  }
  for (const name of DEFAULT_CONFIG_NAMES) {
    const candidate = resolve(cwd, name);
    if (existsSync(candidate)) return candidate;
  }
  throw new UsageError(
    `no config module: pass one (relaybus worker ./src/bus.js) or create ${DEFAULT_CONFIG_NAMES.join(', ')} in ${cwd}; its default export is the bus`,
  );
}

let tsLoader: Promise<void> | undefined;

type Registrar = { register: () => unknown };

function registrarOf(module: unknown): Registrar | undefined {
  const candidate = module as { register?: unknown; default?: { register?: unknown } };
  const register = candidate.register ?? candidate.default?.register;
  return typeof register === 'function' ? { register: register as () => unknown } : undefined;
}

/** Import `specifier` (a tsx API) from beside the CLI, else from the config's folder; undefined when neither has it. */
async function importTsx(specifier: 'tsx/esm/api' | 'tsx/cjs/api', configPath: string): Promise<Registrar | undefined> {
  try {
    const api = registrarOf(await import(specifier));
    if (api) return api;
  } catch {
    // not installed beside the CLI: try the config's own dependencies below
  }
  try {
    return registrarOf(await import(pathToFileURL(createRequire(configPath).resolve(specifier)).href));
  } catch {
    return undefined;
  }
}

/**
 * Register tsx once per process so `import()` of `.ts` files works: its ESM hooks, and its
 * CommonJS hooks for a `.ts` file that Node treats as CommonJS (no `"type": "module"` nearby).
 */
function ensureTypeScript(configPath: string): Promise<void> {
  tsLoader ??= (async () => {
    const esm = await importTsx('tsx/esm/api', configPath);
    if (esm === undefined) {
      throw new UsageError(
        `${basename(configPath)} is TypeScript, and no TypeScript loader is installed: npm install --save-dev tsx (or compile the config and pass the .js file)`,
      );
    }
    esm.register();
    (await importTsx('tsx/cjs/api', configPath))?.register();
  })();
  return tsLoader;
}

function looksLikeBus(value: unknown): value is WorkerBus {
  if (typeof value !== 'object' || value === null) return false;
  const bus = value as Record<string, unknown>;
  return (
    typeof bus.start === 'function' &&
    typeof bus.stop === 'function' &&
    typeof bus.on === 'function' &&
    typeof bus.store === 'object' &&
    bus.store !== null &&
    typeof bus.lifecycle === 'object' &&
    bus.lifecycle !== null
  );
}

/**
 * Import the config module at `path` and return its default export, checked to be a bus.
 * Throws `UsageError` for a file the CLI cannot load and `CliFailure` when the module itself throws.
 */
export async function loadBus(path: string): Promise<WorkerBus> {
  const extension = extname(path).toLowerCase();
  if (TS_EXTENSIONS.has(extension)) {
    await ensureTypeScript(path);
  } else if (!JS_EXTENSIONS.has(extension)) {
    throw new UsageError(`cannot load ${basename(path)}: the config module must be .js, .mjs or .ts`);
  }
  let module: { default?: unknown };
  try {
    module = (await import(pathToFileURL(path).href)) as { default?: unknown };
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'ERR_UNKNOWN_FILE_EXTENSION') {
      throw new UsageError(
        `${basename(path)} is TypeScript, and no TypeScript loader is installed: npm install --save-dev tsx`,
      );
    }
    const message = error instanceof Error ? error.message : String(error);
    throw new CliFailure(`loading ${basename(path)} failed: ${message}`, { cause: error });
  }
  let bus = module.default;
  // A .ts config Node treats as CommonJS arrives as module.exports, with the bus under `default`.
  if (
    !looksLikeBus(bus) &&
    typeof bus === 'object' &&
    bus !== null &&
    looksLikeBus((bus as { default?: unknown }).default)
  ) {
    bus = (bus as { default?: unknown }).default;
  }
  if (looksLikeBus(bus)) return bus;
  const got =
    bus === undefined
      ? 'has no default export'
      : typeof bus === 'function'
        ? 'exports a function by default'
        : `exports ${typeof bus} by default`;
  throw new UsageError(
    `${basename(path)} ${got}; export the bus itself: export default createRelayBus({ store, events })`,
  );
}
