import { quoteIdentifier } from '../statements.js';
import type { Unlisten } from '../sql-client.js';

/**
 * LISTEN on one connection of a `pg.Pool`, held for as long as the listener lives (it is one of the
 * pool's connections: size the pool for it). A dropped connection (server restart, terminated
 * backend, network cut) is given back to the pool destroyed and a new one is opened after a capped
 * backoff; `onNotify` is called after every (re)connect too, since a notification sent while no
 * connection listened is lost and the caller must look for work itself. Polling stays the
 * correctness path: a lost wake-up only costs latency.
 */

/** What the listener needs of a `pg.Pool` and its clients (structural: relaybus never imports `pg`). */
interface ListenPool {
  connect(): Promise<ListenClient>;
}

interface ListenClient {
  query(text: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
  removeListener(event: string, listener: (...args: never[]) => void): unknown;
  release(error?: Error | boolean): void;
}

/** A connection while it listens, and how to take the listener's handlers off it again. */
interface Held {
  readonly client: ListenClient;
  readonly detach: () => void;
}

const RECONNECT_MS = [100, 250, 500, 1_000, 2_000, 5_000];

export async function listenOnPgPool(
  pool: unknown,
  channel: string,
  onNotify: (payload: string) => void,
): Promise<Unlisten> {
  const source = pool as ListenPool;
  let held: Held | undefined;
  let stopped = false;
  let failures = 0;
  let timer: NodeJS.Timeout | undefined;

  const reconnectLater = (): void => {
    if (stopped || timer !== undefined) return;
    const delay = RECONNECT_MS[Math.min(failures, RECONNECT_MS.length - 1)]!;
    failures += 1;
    timer = setTimeout(() => {
      timer = undefined;
      void connect();
    }, delay);
    timer.unref();
  };

  /** Give a connection back without the listener's handlers: destroyed when it failed, pooled otherwise. */
  const giveBack = (current: Held, error?: Error | boolean): void => {
    current.detach();
    current.client.release(error);
  };

  const lost = (current: Held, error?: Error): void => {
    if (held !== current) return; // reported twice ('error' then 'end'), or an old connection
    held = undefined;
    giveBack(current, error ?? true); // a connection that failed is never reused
    reconnectLater();
  };

  async function connect(): Promise<void> {
    if (stopped) return;
    let current: Held | undefined;
    try {
      const client = await source.connect();
      const onNotification = (message: { channel: string; payload?: string }): void => {
        if (message.channel === channel) onNotify(message.payload ?? '');
      };
      const onError = (error?: Error): void => lost(attached, error);
      const onEnd = (): void => lost(attached);
      const attached: Held = {
        client,
        detach: () => {
          client.removeListener('notification', onNotification);
          client.removeListener('error', onError);
          client.removeListener('end', onEnd);
        },
      };
      current = attached;
      client.on('notification', onNotification);
      client.on('error', onError);
      client.on('end', onEnd);
      await client.query(`LISTEN ${quoteIdentifier(channel)}`);
      if (stopped) {
        giveBack(attached, true);
        return;
      }
      held = attached;
      failures = 0;
      onNotify(''); // anything published while no connection listened
    } catch (error) {
      if (current !== undefined) giveBack(current, error instanceof Error ? error : true);
      reconnectLater();
    }
  }

  await connect();
  return async () => {
    stopped = true;
    clearTimeout(timer);
    const current = held;
    held = undefined;
    if (current === undefined) return;
    try {
      await current.client.query(`UNLISTEN ${quoteIdentifier(channel)}`);
      giveBack(current);
    } catch (error) {
      giveBack(current, error instanceof Error ? error : true);
    }
  };
}
