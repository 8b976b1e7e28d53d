/**
 * The README's own-worker snippet ("The worker", own-worker.ts), followed as a user would: in a fresh
 * project outside the repository with relaybus installed from its packed tarball, the quick start's
 * relaybus.config.ts and the snippet saved as the README shows them, run with tsx against a database
 * of their own. One published event is delivered; SIGTERM then ends the process, exit 0, within
 * STOP_WITHIN_MS: `bus.stop()` gives the lanes back and the pool is closed, so nothing (the pool's idle
 * connections) keeps the process alive.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileBlock } from '../docs/doc-set.js';
import { findPostgres } from '../support/databases.js';
import {
  FlowDatabases,
  freshProject,
  packedTarball,
  removeWork,
  run,
  userEnv,
  workDir,
} from '../support/packed-package.js';

const found = await findPostgres();

/** What a SIGTERM-to-exit may take: the bus stops at once when no handler runs. */
const STOP_WITHIN_MS = 3_000;

/** The documented block saved as `name` (its `<!-- snippet: file=name -->` marker). */
function readmeFile(name: string): string {
  return fileBlock(name).code;
}

/** A port nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Publishes one OrderPlaced in a transaction, through the config's pool (as place-order.ts does, without its orders table). */
const PUBLISH = `
import bus, { OrderPlaced, pool } from './relaybus.config.js';

const client = await pool.connect();
try {
  await client.query('BEGIN');
  await bus.publish(client, OrderPlaced, { orderId: 'o-1', customerId: 'c-7' }, { key: 'c-7', id: 'order-o-1' });
  await client.query('COMMIT');
} finally {
  client.release();
}
await pool.end();
`;

describe("README's own-worker snippet, in a fresh project with the packed package", {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const work = workDir('own-worker');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  let project = '';

  before(async () => {
    const tarball = await packedTarball(work);
    project = await freshProject(join(work, 'app'), tarball, ['pg'], ['tsx']);
    writeFileSync(join(project, 'relaybus.config.ts'), readmeFile('relaybus.config.ts'));
    writeFileSync(join(project, 'own-worker.ts'), readmeFile('own-worker.ts'));
    writeFileSync(join(project, 'publish.ts'), PUBLISH);
  });

  after(async () => {
    await databases.drop();
    removeWork(work);
  });

  it(`delivers a published event, then exits 0 within ${STOP_WITHIN_MS / 1000} s of SIGTERM`, {
    timeout: 180_000,
  }, async (t) => {
    const port = await freePort();
    const env = { DATABASE_URL: await databases.create('own_worker'), PORT: String(port) };
    const worker = spawn(join(project, 'node_modules/.bin/tsx'), ['own-worker.ts'], {
      cwd: project,
      env: userEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    worker.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    worker.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
      worker.on('exit', (code, signal) => resolve({ code, signal, at: Date.now() })),
    );
    try {
      // Ready once its first claim succeeded (bus.start() ran the setup): the probe answers 200.
      const deadline = Date.now() + 60_000;
      for (;;) {
        const status = await fetch(`http://127.0.0.1:${port}/`).then(
          (response) => response.status,
          () => 0,
        );
        if (status === 200) break;
        assert.ok(worker.exitCode === null, `own-worker.ts exited early:\n${output}`);
        assert.ok(Date.now() < deadline, `the probe never said ready (last status ${status}):\n${output}`);
        await sleep(200);
      }
      await run(join(project, 'node_modules/.bin/tsx'), ['publish.ts'], project, env);
      const delivered = Date.now() + 20_000;
      while (!output.includes('send-receipt: order o-1, attempt 1')) {
        assert.ok(Date.now() < delivered, `the event was not delivered:\n${output}`);
        await sleep(100);
      }

      const signalledAt = Date.now();
      worker.kill('SIGTERM');
      const outcome = await Promise.race([exited, sleep(15_000).then(() => undefined)]);
      assert.ok(outcome, `own-worker.ts still ran 15 s after SIGTERM:\n${output}`);
      assert.deepEqual({ code: outcome.code, signal: outcome.signal }, { code: 0, signal: null }, output);
      const tookMs = outcome.at - signalledAt;
      t.diagnostic(`own-worker.ts exited ${tookMs} ms after SIGTERM`);
      assert.ok(tookMs < STOP_WITHIN_MS, `own-worker.ts exited ${tookMs} ms after SIGTERM (at most ${STOP_WITHIN_MS})`);
    } finally {
      worker.kill('SIGKILL');
    }
  });
});
