/**
 * The README's "Past one database" flow, followed as a user would, for each broker here: in a fresh directory outside
 * the repository, relaybus installed from its packed tarball with the broker clients the README's install block names
 * (from the npm cache), the config files of its `file=` blocks written as they stand, and the commands of its start
 * block run in the order written (B's inbox first, B's worker, A's worker, then A's publish), each service with a
 * database of its own. The order A publishes must reach B's handler. RabbitMQ and NATS JetStream run where they answer
 * (else skipped with the reason); Kafka is reported skipped (no broker here, and the README shows it as one-line
 * variants, not files).
 *
 * A README change that breaks the flow (a file, a command, a package name, the order) fails this test.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect as natsConnect } from '@nats-io/transport-node';
import amqp from 'amqplib';
import pg from 'pg';
import { AMQP_URL, KAFKA_BROKERS, NATS_URL, probeNats, probeRabbit } from '../broker/support.js';
import { docPage } from '../docs/doc-set.js';
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

/** The guide's page with the relay and inbox flow. */
const PAGE = 'docs/guide/brokers.md';
const SHELL = new Set(['sh', 'bash', 'shell']);
const found = await findPostgres();
const rabbitSkip = await probeRabbit();
const natsSkip = await probeNats();
const blocks = docPage(PAGE).parts.blocks;

/** The code of the block marked `file=<name>` in the section. */
function fileBlock(name: string): string {
  const block = blocks.find((b) => b.marker?.file === name);
  assert.ok(block, `${PAGE} has a block marked <!-- snippet: file=${name} -->`);
  return block.code;
}

/** The shell block of the section whose code contains `text`. */
function shellBlock(text: string): string {
  const block = blocks.find((b) => SHELL.has(b.lang) && b.code.includes(text));
  assert.ok(block, `${PAGE} has a shell block with "${text}"`);
  return block.code;
}

/** Lines of a shell block without comments and blanks. */
const commands = (code: string) =>
  code
    .split('\n')
    .map((line) => line.replace(/\s+#.*$/, '').trim())
    .filter((line) => line !== '' && !line.startsWith('#'));

/** The packages the install block names for the module `relaybus/<module>` (its comment says which). */
function clientPackages(module: string): string[] {
  const line = shellBlock('npm install amqplib')
    .split('\n')
    .find((l) => l.includes(`relaybus/${module}`));
  assert.ok(line, `the install block names the packages of relaybus/${module}`);
  const words = line.replace(/#.*$/, '').trim().split(/\s+/);
  assert.deepEqual(words.slice(0, 2), ['npm', 'install']);
  return words.slice(2);
}

interface Step {
  readonly env: Record<string, string>;
  readonly argv: readonly string[];
}

/** The start block as steps: `export X=...` lines, then `VAR=value ... command args` lines in order. */
function startSteps(): { exported: Record<string, string>; steps: Step[] } {
  const exported: Record<string, string> = {};
  const steps: Step[] = [];
  for (const line of commands(shellBlock('relaybus inbox'))) {
    const words = line.split(/\s+/);
    if (words[0] === 'export') {
      const [name, ...value] = words[1]!.split('=');
      exported[name!] = value.join('=');
      continue;
    }
    const env: Record<string, string> = {};
    while (/^[A-Z_]+=/.test(words[0]!)) {
      const [name, ...value] = words.shift()!.split('=');
      env[name!] = value.join('=');
    }
    steps.push({ env, argv: words });
  }
  return { exported, steps };
}

/** A long-running command of the flow, in a process group of its own (stopped with SIGTERM to the group). */
class Running {
  output = '';
  readonly #child: ChildProcess;
  readonly #exited: Promise<number | null>;

  constructor(argv: readonly string[], cwd: string, env: Record<string, string>) {
    this.#child = spawn(argv[0]!, argv.slice(1), { cwd, env: userEnv(env), detached: true, stdio: 'pipe' });
    this.#child.stdout!.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    this.#child.stderr!.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    this.#exited = new Promise((resolve) => this.#child.once('exit', (code) => resolve(code)));
  }

  get exitCode(): number | null {
    return this.#child.exitCode;
  }

  async waitFor(pattern: RegExp, what: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.output)) {
      if (this.#child.exitCode !== null)
        assert.fail(`${what}: the process exited ${this.#child.exitCode}:\n${this.output}`);
      if (Date.now() > deadline) assert.fail(`${what}: not within ${timeoutMs} ms; its output:\n${this.output}`);
      await sleep(100);
    }
  }

  async stop(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.pid === undefined) return;
    try {
      process.kill(-this.#child.pid, 'SIGTERM');
    } catch {
      return; // gone already
    }
    const code = await Promise.race([this.#exited, sleep(20_000).then(() => 'timeout' as const)]);
    if (code === 'timeout') process.kill(-this.#child.pid, 'SIGKILL');
  }
}

/** What a broker needs from the flow: its env, readiness of B's inbox, and removal of what the flow declared. */
interface Broker {
  readonly name: string;
  readonly module: 'amqp' | 'nats';
  readonly env: Record<string, string>;
  inboxReady(): Promise<boolean>;
  clean(): Promise<void>;
}

const rabbit: Broker = {
  name: 'RabbitMQ',
  module: 'amqp',
  env: { AMQP_URL },
  async inboxReady() {
    const connection = await amqp.connect(AMQP_URL);
    try {
      const channel = await connection.createChannel();
      channel.on('error', () => {});
      const queue = await channel.checkQueue('orders-b').catch(() => undefined);
      return queue !== undefined && queue.consumerCount > 0;
    } finally {
      await connection.close().catch(() => {});
    }
  },
  async clean() {
    const connection = await amqp.connect(AMQP_URL);
    try {
      const channel = await connection.createChannel();
      for (const queue of ['orders-b', 'orders-b.dead']) await channel.deleteQueue(queue);
      for (const exchange of ['orders', 'orders-b.dlx']) await channel.deleteExchange(exchange);
    } finally {
      await connection.close().catch(() => {});
    }
  },
};

const nats: Broker = {
  name: 'NATS JetStream',
  module: 'nats',
  env: { NATS_URL },
  async inboxReady() {
    const nc = await natsConnect({ servers: NATS_URL });
    try {
      const info = await (await jetstreamManager(nc)).consumers.info('ORDERS', 'orders-b').catch(() => undefined);
      return info !== undefined && info.num_waiting > 0;
    } finally {
      await nc.close();
    }
  },
  async clean() {
    const nc = await natsConnect({ servers: NATS_URL });
    try {
      await (await jetstreamManager(nc)).streams.delete('ORDERS').catch(() => {});
    } finally {
      await nc.close();
    }
  },
};

describe('README flow: relay and inbox between two databases', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const work = workDir('relay-inbox');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  const running: Running[] = [];
  let project = '';

  before(async () => {
    const tarball = await packedTarball(work);
    // The user installs relaybus, pg, tsx (the quick start) and the clients of the brokers they use.
    project = await freshProject(
      join(work, 'app'),
      tarball,
      ['pg', ...clientPackages('amqp'), ...clientPackages('nats')],
      ['tsx'],
    );
  });

  after(async () => {
    for (const command of running) await command.stop();
    await databases.drop();
    removeWork(work);
  });

  /** Follow the flow for `broker` with the config blocks `a` and `b` written as service-a/b.config.ts. */
  async function follow(broker: Broker, a: string, b: string): Promise<void> {
    await broker.clean(); // what an earlier, interrupted run left on the shared broker
    try {
      writeFileSync(join(project, 'service-a.config.ts'), fileBlock(a));
      writeFileSync(join(project, 'service-b.config.ts'), fileBlock(b));
      writeFileSync(join(project, 'place-order-a.ts'), fileBlock('place-order-a.ts'));
      const urls: Record<string, string> = {
        a: await databases.create(`${broker.module}_a`),
        b: await databases.create(`${broker.module}_b`),
      };
      const { exported, steps } = startSteps();
      assert.ok('AMQP_URL' in exported, 'the start block exports the broker URL');
      const relaybusCommands = steps.filter((s) => s.argv[1] === 'relaybus').map((s) => s.argv.slice(2).join(' '));
      assert.deepEqual(
        relaybusCommands,
        ['inbox service-b.config.ts', 'worker service-b.config.ts', 'worker service-a.config.ts'],
        "B's inbox first, then B's worker, then A's worker (the relay)",
      );
      let workerB: Running | undefined;
      for (const step of steps) {
        // The database URL is the user's: /a and /b stand for the two services' databases here.
        const service = /\/([ab])$/.exec(step.env.DATABASE_URL ?? '')?.[1];
        assert.ok(service, `each command names service a's or b's DATABASE_URL: ${step.argv.join(' ')}`);
        const env = { ...step.env, ...broker.env, DATABASE_URL: urls[service]! };
        if (step.argv[1] === 'tsx') {
          await run(step.argv[0]!, step.argv.slice(1), project, env);
          continue;
        }
        const started = new Running(step.argv, project, env);
        running.push(started);
        const [command] = step.argv.slice(2);
        if (command === 'inbox') {
          const deadline = Date.now() + 60_000;
          while (!(await broker.inboxReady())) {
            assert.ok(started.exitCode === null, `relaybus inbox exited ${started.exitCode}:\n${started.output}`);
            assert.ok(Date.now() < deadline, `B's inbox consumes within 60 s; its output:\n${started.output}`);
            await sleep(200);
          }
        } else {
          await started.waitFor(/running /, `relaybus ${step.argv.slice(2).join(' ')} starts`, 60_000);
          if (service === 'b') workerB = started;
        }
      }
      assert.ok(workerB, "B's worker was started");
      await workerB.waitFor(
        /update-ledger: order o-1 \(event order-o-1 from service A\)/,
        "A's order reaches B's handler",
        60_000,
      );
      const left = new pg.Pool({ connectionString: urls.a, max: 1 });
      try {
        const { rows } = await left.query(
          'SELECT status, attempts, last_error FROM relaybus.relaybus_deliveries ORDER BY id',
        );
        assert.deepEqual(rows, [], "nothing left in A: the relay's delivery completed");
      } finally {
        await left.end();
      }
    } finally {
      for (const command of running.splice(0)) await command.stop();
      await broker.clean().catch(() => {});
    }
  }

  it('RabbitMQ: an order published on A arrives at B, following the README literally', {
    skip: rabbitSkip,
    timeout: 600_000,
  }, async () => {
    await follow(rabbit, 'service-a.config.ts', 'service-b.config.ts');
  });

  it('NATS JetStream: an order published on A arrives at B, following the README literally', {
    skip: natsSkip,
    timeout: 600_000,
  }, async () => {
    await follow(nats, 'service-a-nats.config.ts', 'service-b-nats.config.ts');
  });

  it('Kafka', {
    skip:
      KAFKA_BROKERS === undefined
        ? 'KAFKA_BROKERS is unset: no Kafka broker here (and the README shows Kafka as one-line variants, not files)'
        : 'the README shows Kafka as one-line variants of the RabbitMQ files, not files to follow',
  }, () => {});
});
