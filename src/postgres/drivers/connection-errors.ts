import { InvalidInputError } from '../../core/errors.js';

/**
 * Keeps a dropped `pg` connection from crashing the process. A `pg.Client` whose connection fails
 * (`pg_terminate_backend`, a server restart, a network cut) emits `'error'`; with no listener, Node
 * turns that into an uncaught exception. pg-pool listens on idle clients only, re-emits their errors
 * on the pool (a pool without `pool.on('error')` crashes too) and removes its listener when a client
 * is checked out. The statement in progress fails with the error either way (pg rejects every
 * queued query), so listening is enough: the caller sees a failed statement, and the process lives.
 *
 * Each pool (or lone client) gets listeners once, however many drivers wrap it: a pool `'error'`
 * listener for idle clients, and an `'error'` listener on every client the pool hands out
 * (`'acquire'`), whoever checks it out: relaybus, Kysely, Drizzle or the application. The errors
 * go to the subscribers of `onConnectionError`; listeners of the application are left alone.
 */

/** Receives a connection error that relaybus kept from crashing the process. */
export type ConnectionErrorListener = (error: Error) => void;

/** Node's EventEmitter, as far as relaybus uses it (runtime-checked: the public types need not declare it). */
interface EmitterLike {
  on(event: string, listener: (...args: unknown[]) => void): unknown;
}

interface Guard {
  readonly listeners: Set<ConnectionErrorListener>;
  readonly onError: (error: unknown) => void;
}

/** Pools and lone clients that already have relaybus's listeners. */
const guards = new WeakMap<object, Guard>();
/** Pooled clients that already have relaybus's `'error'` listener. */
const guardedClients = new WeakSet<object>();
/** Errors already handed to the subscribers: an idle client's error reaches its own listener and the pool's. */
const reported = new WeakSet<object>();

function isEmitter(value: unknown): value is EmitterLike {
  return typeof value === 'object' && value !== null && typeof (value as { on?: unknown }).on === 'function';
}

function newGuard(): Guard {
  const listeners = new Set<ConnectionErrorListener>();
  const onError = (error: unknown): void => {
    if (typeof error === 'object' && error !== null) {
      if (reported.has(error)) return;
      reported.add(error);
    }
    const reason = error instanceof Error ? error : new Error(String(error));
    for (const listener of [...listeners]) {
      try {
        listener(reason);
      } catch {
        // A throwing listener inside an 'error' event would crash the process: the very thing this prevents.
      }
    }
  };
  return { listeners, onError };
}

function listenOnClient(client: unknown, guard: Guard): void {
  if (!isEmitter(client) || guardedClients.has(client)) return;
  guardedClients.add(client);
  client.on('error', guard.onError);
}

/** A `pg.Pool` (anything with pool counters), as opposed to a lone `pg.Client`. */
export function isPgPool(value: unknown): boolean {
  return (
    isEmitter(value) &&
    'totalCount' in value &&
    'idleCount' in value &&
    typeof (value as { connect?: unknown }).connect === 'function'
  );
}

/**
 * Put relaybus's listeners on a `pg.Pool` (once per pool) and return its subscribe function.
 * Returns undefined for something that is not an event emitter (a pool-like wrapper).
 */
export function guardPgPool(pool: unknown): ((listener: ConnectionErrorListener) => () => void) | undefined {
  if (!isEmitter(pool)) return undefined;
  let guard = guards.get(pool);
  if (guard === undefined) {
    const created = newGuard();
    guard = created;
    guards.set(pool, created);
    pool.on('error', created.onError); // an idle client dropped: pg-pool has removed it already
    pool.on('acquire', (client) => listenOnClient(client, created)); // a checked-out client has no pool listener
  }
  return subscriber(guard);
}

/** Put relaybus's `'error'` listener on a lone `pg.Client` (once) and return its subscribe function. */
export function guardPgClient(client: unknown): ((listener: ConnectionErrorListener) => () => void) | undefined {
  if (!isEmitter(client)) return undefined;
  let guard = guards.get(client);
  if (guard === undefined) {
    const created = newGuard();
    guard = created;
    guards.set(client, created);
    listenOnClient(client, created);
  }
  return subscriber(guard);
}

/**
 * Listen on a client that `pool` handed out (for a pool that may not emit `'acquire'`); a no-op for
 * a client that already has the listener.
 */
export function guardCheckedOut(pool: unknown, client: unknown): void {
  const guard = isEmitter(pool) ? guards.get(pool) : undefined;
  if (guard !== undefined) listenOnClient(client, guard);
}

function subscriber(guard: Guard): (listener: ConnectionErrorListener) => () => void {
  return (listener) => {
    if (typeof listener !== 'function')
      throw new InvalidInputError(`onConnectionError() needs a function, got ${typeof listener}.`);
    const own = (error: Error): void => listener(error); // a listener subscribed twice gets two independent unsubscribes
    guard.listeners.add(own);
    return () => {
      guard.listeners.delete(own);
    };
  };
}
