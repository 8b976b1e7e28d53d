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
  on(event: 'notification', listener: (message: { channel: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
  release(error?: Error | boolean): void;
}

const RECONNECT_MS = [100, 250, 500, 1_000, 2_000, 5_000];

export async function listenOnPgPool(pool: unknown, channel: string, onNotify: () => void): Promise<Unlisten> {
  const source = pool as ListenPool;
  let client: ListenClient | undefined;
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

  const lost = (held: ListenClient, error?: Error): void => {
    if (client !== held) return; // reported twice ('error' then 'end'), or an old connection
    client = undefined;
    held.release(error ?? true); // destroy it: a listening connection is never reused
    reconnectLater();
  };

  async function connect(): Promise<void> {
    if (stopped) return;
    let held: ListenClient | undefined;
    try {
      held = await source.connect();
      const current = held;
      current.on('notification', (message) => {
        if (message.channel === channel) onNotify();
      });
      current.on('error', (error) => lost(current, error));
      current.on('end', () => lost(current));
      await current.query(`LISTEN ${quoteIdentifier(channel)}`);
      if (stopped) {
        current.release(true);
        return;
      }
      client = current;
      failures = 0;
      onNotify(); // anything published while no connection listened
    } catch (error) {
      held?.release(error instanceof Error ? error : true);
      reconnectLater();
    }
  }

  await connect();
  return async () => {
    stopped = true;
    clearTimeout(timer);
    const held = client;
    client = undefined;
    if (held === undefined) return;
    try {
      await held.query(`UNLISTEN ${quoteIdentifier(channel)}`);
      held.release();
    } catch (error) {
      held.release(error instanceof Error ? error : true);
    }
  };
}
