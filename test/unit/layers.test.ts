/**
 * The folders of src/ are layers, and imports run one way: core (leaves: errors, events, lanes, clock, handler and
 * option types) <- store (the contract) <- dispatcher <- bus (the API) <- the drivers, brokers, telemetry and CLI.
 * A file may import its own layer and the layers below it, never one above (no folder imports another in a circle).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

const SRC = new URL('../../src/', import.meta.url).pathname;
/** Each layer and the folders it must not import from. */
const FORBIDDEN: Readonly<Record<string, readonly string[]>> = {
  core: ['store', 'dispatcher', 'bus', 'memory', 'postgres', 'cli', 'broker', 'amqp', 'nats', 'kafka', 'telemetry'],
  store: ['dispatcher', 'bus', 'memory', 'postgres', 'cli', 'broker', 'amqp', 'nats', 'kafka', 'telemetry'],
  dispatcher: ['bus', 'memory', 'postgres', 'cli', 'broker', 'amqp', 'nats', 'kafka', 'telemetry'],
  bus: ['memory', 'postgres', 'cli', 'broker', 'amqp', 'nats', 'kafka', 'telemetry'],
};

function sources(folder: string): string[] {
  return readdirSync(join(SRC, folder), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => join(folder, file));
}

/** The src/ folders a file imports from (type-only imports count: a layer names nothing above it). */
function importedFolders(file: string): string[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  const folders: string[] = [];
  for (const [, specifier] of text.matchAll(/import (?:type )?[^;]*?from '(\.[^']+)'/g)) {
    const target = join(file, '..', specifier!).replace(/\.js$/, '.ts');
    const parts = target.split('/');
    if (parts.length < 2) continue;
    folders.push(parts[0]!);
  }
  return folders;
}

describe('src/ layers', () => {
  for (const [layer, forbidden] of Object.entries(FORBIDDEN)) {
    it(`${layer}/ imports nothing from ${forbidden.join(', ')}`, () => {
      const offending = sources(layer).flatMap((file) =>
        importedFolders(file)
          .filter((folder) => forbidden.includes(folder))
          .map((folder) => `${file} -> ${folder}/`),
      );
      assert.deepEqual(offending, []);
    });
  }
});
