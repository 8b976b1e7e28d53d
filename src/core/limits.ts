/**
 * The longest name relaybus stores: event types, handler names, event ids and keys. One limit for all of them, so a
 * name `defineEvent` or `bus.on` accepts is never refused by a store (and the SQL function checks the same).
 */
export const MAX_NAME_LENGTH = 200;
