/**
 * `natsTarget({ logger })` reports its connection: a lost connection as a warning, the reconnect as info (against a
 * private nats-server the test kills and restarts; the machine's shared server is never touched).
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { Logger } from '../../src/index.js';
import { natsTarget, relayTo } from '../../src/nats/index.js';
import { natsSkip, PrivateNats, until } from './support.js';

const skip = (await natsSkip()) ?? (await PrivateNats.unavailable());

describe('natsTarget logger', { skip }, () => {
  let server: PrivateNats | undefined;
  after(async () => {
    await server?.destroy();
  });

  it('logs the loss of its connection (warn) and the reconnect (info)', { timeout: 30_000 }, async () => {
    server = await PrivateNats.start();
    const admin = await connect({ servers: server.url });
    await (await jetstreamManager(admin)).streams.add({ name: 'LOGS', subjects: ['logs.>'] });
    await admin.close();
    const lines: { level: string; message: string }[] = [];
    const logger: Logger = {
      debug: (message) => lines.push({ level: 'debug', message }),
      info: (message) => lines.push({ level: 'info', message }),
      warn: (message) => lines.push({ level: 'warn', message }),
      error: (message) => lines.push({ level: 'error', message }),
    };
    const target = natsTarget({ servers: server.url, logger });
    try {
      const context = {
        delivery: {
          id: 'd',
          eventId: 'e-1',
          eventType: 'item.created',
          handler: 'h',
          key: null,
          sequence: null,
          attempt: 1,
          maxAttempts: 1,
          headers: {},
          createdAt: new Date(),
        },
        signal: new AbortController().signal,
      };
      await relayTo(target, { subject: 'logs.a' })({ n: 1 }, context);
      await server.kill();
      await until(
        async () =>
          lines.some((l) => l.level === 'warn' && /relay lost its connection to NATS/.test(l.message))
            ? true
            : undefined,
        'the loss logged as a warning',
        10_000,
      );
      await server.up();
      await until(
        async () =>
          lines.some((l) => l.level === 'info' && /relay reconnected to NATS/.test(l.message)) ? true : undefined,
        'the reconnect logged',
        15_000,
      );
      assert.ok(lines.some((l) => l.level === 'debug' && /relay connected to NATS/.test(l.message)));
    } finally {
      await target.close();
    }
  });
});
