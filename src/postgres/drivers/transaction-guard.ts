import { InvalidStateError } from '../../core/errors.js';

/**
 * A transaction handed to a handler must not outlive its transaction. relaybus rolls back the
 * transaction of a handler that timed out or lost its lease, and the connection goes back to its
 * pool; a handler that ignores its signal could otherwise keep writing through the old object, in
 * autocommit or inside another caller's transaction on the same connection. The pg, postgres.js,
 * PGlite and Drizzle drivers' `transaction()` therefore hand out this proxy, which refuses every
 * call once `fn` has settled, or once the transaction itself has ended (`inTransaction`), whichever
 * comes first. (Kysely needs none: its transaction object refuses statements once it ended.)
 */

/** Whether the proxy still passes calls through; closed by whoever sees the transaction end first. */
interface Gate {
  open: boolean;
}

function refuse(): never {
  throw new InvalidStateError(
    'This transaction has ended (the handler returned, timed out or lost its lease, or the connection dropped); the statement was ' +
      'refused. Stop using ctx.transaction once ctx.signal is aborted.',
  );
}

async function runThrough<Tx extends object, T>(tx: Tx, fn: (tx: Tx) => Promise<T>, gate: Gate): Promise<T> {
  const guarded = new Proxy(tx, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => (gate.open ? Reflect.apply(value, target, args) : refuse());
    },
    // postgres.js transactions are tagged-template functions.
    apply(target, thisArgument, args) {
      return gate.open ? Reflect.apply(target as (...a: unknown[]) => unknown, thisArgument, args) : refuse();
    },
  });
  try {
    return await fn(guarded);
  } finally {
    gate.open = false;
  }
}

/** Hand `fn` a guarded `tx` that refuses every call once `fn` has settled. */
export function runGuarded<Tx extends object, T>(tx: Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return runThrough(tx, fn, { open: true });
}

/**
 * Run `fn` in the transaction that `begin` opens (`sql.begin`, `db.transaction`), through a guard
 * that also closes when that transaction settles while `fn` still runs. postgres.js ends a
 * transaction at once when its connection drops, while the handler goes on. A statement through the
 * old transaction would then crash postgres.js 3.4 (a write on its closed socket: an uncaught
 * TypeError), or run outside any transaction once the connection object reconnected for other work;
 * so would the COMMIT or ROLLBACK that postgres.js itself sends when the callback settles. So the
 * callback handed to `begin` never settles once the transaction has ended (nothing references it
 * then, and it is collected).
 */
export async function inTransaction<Tx extends object, T>(
  begin: (body: (tx: Tx) => Promise<T>) => Promise<T>,
  fn: (tx: Tx) => Promise<T>,
): Promise<T> {
  const gate: Gate = { open: true };
  let ended = false;
  // Settle one macrotask later: a dropped connection fails the statement `fn` awaits and ends the
  // transaction in the same I/O callback, and `fn` may settle first by a few microtasks.
  const body = (tx: Tx): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      runThrough(tx, fn, gate).then(
        (value) =>
          setImmediate(() => {
            if (!ended) resolve(value);
          }),
        (error: unknown) =>
          setImmediate(() => {
            if (!ended) reject(error);
          }),
      );
    });
  try {
    return await begin(body);
  } finally {
    ended = true;
    gate.open = false;
  }
}
