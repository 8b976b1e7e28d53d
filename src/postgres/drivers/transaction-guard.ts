import { InvalidStateError } from '../../core/errors.js';

/**
 * A transaction handed to a handler must not outlive its transaction. relaybus rolls back the
 * transaction of a handler that timed out or lost its lease, and the connection goes back to its
 * pool; a handler that ignores its signal could otherwise keep writing through the old object, in
 * autocommit or inside another caller's transaction on the same connection. Every driver's
 * `transaction()` therefore hands out this proxy, which refuses every call once `fn` has settled.
 */
export async function runGuarded<Tx extends object, T>(tx: Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  let open = true;
  const refuse = (): never => {
    throw new InvalidStateError(
      'This transaction has ended (relaybus committed or rolled it back after the handler returned, timed out or lost its lease); '
      + 'a statement through it afterwards was refused. Stop using ctx.transaction once ctx.signal is aborted.',
    );
  };
  const guarded = new Proxy(tx, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => (open ? Reflect.apply(value, target, args) : refuse());
    },
    // postgres.js transactions are tagged-template functions.
    apply(target, thisArgument, args) {
      return open ? Reflect.apply(target as (...a: unknown[]) => unknown, thisArgument, args) : refuse();
    },
  });
  try {
    return await fn(guarded);
  } finally {
    open = false;
  }
}
