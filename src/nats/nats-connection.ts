import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { InvalidOptionsError } from '../core/errors.js';
import {
  BrokerNotFoundError,
  BrokerUnavailableError,
  MessageTooLargeError,
  redactUrl,
} from '../broker/broker-errors.js';

/**
 * Connecting to NATS (JetStream) and typing its errors. The client reconnects by itself for ever
 * once connected; only the first connect can fail, with `BrokerUnavailableError` naming the servers.
 */

/** The server list, checked: `nats://host:4222` (or `tls://`, `ws://`, `host:port`). */
export function checkServers(servers: unknown, where: string): string[] {
  const list = typeof servers === 'string' ? [servers] : Array.isArray(servers) ? servers : undefined;
  if (list === undefined || list.length === 0 || list.some((s) => typeof s !== 'string' || s === '')) {
    throw new InvalidOptionsError(
      `${where}: \`servers\` is required: a NATS URL such as nats://localhost:4222, or a list of them.`,
    );
  }
  for (const server of list as string[]) {
    const url = /^[a-z]+:\/\//i.test(server) ? server : `nats://${server}`;
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new InvalidOptionsError(`${where}: "${redactUrl(url)}" is not a NATS URL; expected nats://host:4222.`);
    }
    if (!['nats:', 'tls:', 'ws:', 'wss:'].includes(parsed.protocol)) {
      throw new InvalidOptionsError(
        `${where}: a NATS server URL must start with nats://, tls://, ws:// or wss://, got ${parsed.protocol}//.`,
      );
    }
  }
  return list as string[];
}

/** The servers for messages, passwords hidden. */
export function describeServers(servers: readonly string[]): string {
  return servers.map((s) => (/^[a-z]+:\/\//i.test(s) ? redactUrl(s) : s)).join(', ');
}

/** Connect, reconnecting for ever afterwards; `BrokerUnavailableError` when the first connect fails. */
export async function connectNats(
  servers: readonly string[],
  name: string,
  timeoutMs: number,
): Promise<NatsConnection> {
  try {
    return await connect({
      servers: [...servers],
      name,
      timeout: timeoutMs,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
    });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const refused = /authorization|authentication|permissions/i.test(message);
    return Promise.reject(
      new BrokerUnavailableError(
        `NATS at ${describeServers(servers)} ${refused ? 'refused the connection' : 'cannot be reached'}: ${message}`,
        { cause: error, retryable: !refused },
      ),
    );
  }
}

/** A typed error for a failed JetStream call about `what`. */
export function jetStreamError(error: unknown, what: string): Error {
  const name = error instanceof Error ? error.constructor.name : '';
  const message = error instanceof Error ? error.message : String(error);
  if (name === 'StreamNotFoundError' || name === 'ConsumerNotFoundError' || /not found/i.test(message)) {
    return new BrokerNotFoundError(`${what} does not exist: ${message}`, { cause: error });
  }
  if (/no responders|JetStreamNotEnabled|jetstream is not enabled/i.test(`${name} ${message}`)) {
    return new BrokerNotFoundError(
      `${what}: no JetStream stream answered (no stream captures the subject, or JetStream is off): ${message}`,
      { cause: error },
    );
  }
  if (/max_payload|maximum payload/i.test(message)) return new MessageTooLargeError(`${what}: ${message}`, 0, 0);
  return new BrokerUnavailableError(`${what}: ${message}`, { cause: error });
}

/**
 * The error of a publish to `subject` that no stream answered. The client says "jetstream is not enabled" for both
 * causes; asking the server tells them apart: JetStream off, or (usually) no stream captures the subject yet because
 * the inbox that declares it has not started.
 */
export async function noStreamError(
  nc: NatsConnection,
  subject: string,
  what: string,
  cause: unknown,
): Promise<BrokerNotFoundError> {
  let enabled: boolean;
  try {
    await jetstreamManager(nc, { timeout: 2_000 });
    enabled = true;
  } catch (error) {
    enabled = !/not enabled|JetStreamNotEnabled|no responders/i.test(`${(error as Error)?.name} ${String(error)}`);
  }
  if (!enabled)
    return new BrokerNotFoundError(
      `${what}: JetStream is not enabled on this NATS server; start nats-server with JetStream on (-js)`,
      { cause },
    );
  return new BrokerNotFoundError(
    `${what}: no stream captures subject "${subject}" (the stream does not exist yet). Start the inbox first: ` +
      'natsInbox({ declare: { subjects } }) creates the stream when `relaybus inbox` starts; or create it yourself ' +
      '(nats stream add). The relay retries until it exists.',
    { cause },
  );
}

/** True when the server understands `+TERM <reason>` (nats-server 2.11 and later); older ones ignore the whole ack. */
export function termTakesReason(version: string | undefined): boolean {
  const [major = 0, minor = 0] = (version ?? '').split('.').map(Number);
  return major > 2 || (major === 2 && minor >= 11);
}
