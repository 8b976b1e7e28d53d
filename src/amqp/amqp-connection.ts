import amqp from 'amqplib';
import { InvalidOptionsError } from '../core/errors.js';
import {
  BrokerNotFoundError,
  BrokerRejectedError,
  BrokerUnavailableError,
  MessageTooLargeError,
  redactUrl,
} from '../broker/broker-errors.js';

/**
 * Connecting to RabbitMQ with amqplib, and turning its errors into typed ones: a broker that
 * cannot be reached (retryable), a login or virtual host refused (not), a queue or exchange that
 * does not exist (404), a precondition the broker refused (406: a queue declared with other
 * arguments, a message over `max_message_size`).
 */

/** Throw `InvalidOptionsError` unless `url` is an `amqp://` or `amqps://` URL. */
export function checkAmqpUrl(url: unknown, where: string): string {
  if (typeof url !== 'string' || url === '')
    throw new InvalidOptionsError(`${where}: \`url\` is required, e.g. amqp://guest:guest@localhost:5672.`);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidOptionsError(`${where}: \`url\` is not a URL; expected amqp://user:password@host:5672/vhost.`);
  }
  if (parsed.protocol !== 'amqp:' && parsed.protocol !== 'amqps:') {
    throw new InvalidOptionsError(
      `${where}: \`url\` must start with amqp:// or amqps://, got ${parsed.protocol}// (${redactUrl(url)}).`,
    );
  }
  return url;
}

/** The AMQP reply code of an amqplib error (404, 406, 403, 320, ...), if any. */
function replyCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'number') return code;
  const match = /\b(\d{3}) \(/.exec(error instanceof Error ? error.message : '');
  return match ? Number(match[1]) : undefined;
}

/** A typed error for a failed connect to `url`. */
export function connectError(error: unknown, url: string): Error {
  const message = error instanceof Error ? error.message : String(error);
  const code = replyCode(error);
  const broker = `RabbitMQ at ${redactUrl(url)}`;
  if (code === 403 || /ACCESS[-_]REFUSED/.test(message)) {
    return new BrokerUnavailableError(`${broker} refused the login: ${message}`, { cause: error, retryable: false });
  }
  if (code === 530 || /NOT[-_]ALLOWED|vhost/i.test(message)) {
    return new BrokerUnavailableError(`${broker} refused the virtual host: ${message}`, {
      cause: error,
      retryable: false,
    });
  }
  return new BrokerUnavailableError(
    `${broker} cannot be reached: ${message || (error as { code?: string }).code || 'connection failed'}`,
    { cause: error },
  );
}

/** A typed error for a failed channel operation on `what` (a queue, an exchange, a publish). */
export function channelError(error: unknown, what: string): Error {
  const message = error instanceof Error ? error.message : String(error);
  const code = replyCode(error);
  // amqplib's own check of a field it cannot encode (a name over 255 bytes): the same call fails the same way.
  if (error instanceof TypeError)
    return new BrokerRejectedError(`${what}: cannot be encoded for RabbitMQ: ${message}`, {
      cause: error,
      permanent: true,
    });
  if (code === 404) return new BrokerNotFoundError(`${what} does not exist: ${message}`, { cause: error });
  if (code === 406 && /larger than configured max size/i.test(message)) {
    const [, size, limit] = /size (\d+) is larger than configured max size (\d+)/.exec(message) ?? [];
    return new MessageTooLargeError(
      `${what}: the message is larger than RabbitMQ accepts (${message})`,
      Number(size ?? 0),
      Number(limit ?? 0),
    );
  }
  if (code === 406) return new BrokerRejectedError(`${what}: RabbitMQ refused it: ${message}`, { cause: error });
  if (code === 403) return new BrokerRejectedError(`${what}: access refused: ${message}`, { cause: error });
  return new BrokerUnavailableError(`${what}: ${message}`, { cause: error });
}

/** Open a connection named `name` (shown in RabbitMQ's connection list); typed errors on failure. */
export async function connectAmqp(url: string, name: string, timeoutMs: number): Promise<amqp.ChannelModel> {
  try {
    return await amqp.connect(url, { timeout: timeoutMs, clientProperties: { connection_name: name } });
  } catch (error) {
    throw connectError(error, url);
  }
}

/** Close quietly: the connection may be gone already. */
export async function closeQuietly(closable: { close(): Promise<void> } | undefined): Promise<void> {
  if (closable === undefined) return;
  try {
    await closable.close();
  } catch {
    // already closed
  }
}
