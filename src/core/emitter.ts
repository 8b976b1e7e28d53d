import type { Logger } from './logger.js';

/**
 * A tiny typed event emitter for lifecycle events (`bus.lifecycle`). Unlike Node's EventEmitter it
 * has no special `error` event, never throws from `emit`, and a listener that throws is logged and
 * skipped, so a metrics hook can never break the dispatcher.
 */

/** Subscribe side of an emitter: what the public API exposes. */
export interface TypedEvents<TMap> {
  /**
   * Call `listener` for every `name` event; returns a function that unsubscribes it.
   *
   * ```ts
   * const off = bus.lifecycle.on('dead', ({ delivery, error }) => alert(delivery.handler, error));
   * ```
   */
  on<K extends keyof TMap>(name: K, listener: (event: TMap[K]) => void): () => void;
  /** Call `listener` for the next `name` event only. */
  once<K extends keyof TMap>(name: K, listener: (event: TMap[K]) => void): () => void;
  /** Remove a listener added with `on` or `once`. */
  off<K extends keyof TMap>(name: K, listener: (event: TMap[K]) => void): void;
}

/** The emitter; `emit` stays internal to the library. */
export class TypedEmitter<TMap> implements TypedEvents<TMap> {
  readonly #listeners = new Map<keyof TMap, Set<(event: never) => void>>();
  readonly #logger: () => Logger;

  constructor(logger: () => Logger) {
    this.#logger = logger;
  }

  on<K extends keyof TMap>(name: K, listener: (event: TMap[K]) => void): () => void {
    if (typeof listener !== 'function') throw new TypeError(`events.on(${String(name)}) needs a listener function.`);
    let set = this.#listeners.get(name);
    if (set === undefined) this.#listeners.set(name, (set = new Set()));
    set.add(listener as (event: never) => void);
    return () => this.off(name, listener);
  }

  once<K extends keyof TMap>(name: K, listener: (event: TMap[K]) => void): () => void {
    const wrapped = (event: TMap[K]): void => {
      this.off(name, wrapped);
      listener(event);
    };
    return this.on(name, wrapped);
  }

  off<K extends keyof TMap>(name: K, listener: (event: TMap[K]) => void): void {
    this.#listeners.get(name)?.delete(listener as (event: never) => void);
  }

  /** Whether `name` has a listener: a hot path can skip building an event nobody hears. */
  has<K extends keyof TMap>(name: K): boolean {
    const set = this.#listeners.get(name);
    return set !== undefined && set.size > 0;
  }

  /** Deliver `event` to every listener of `name`; listener errors are logged, never thrown. */
  emit<K extends keyof TMap>(name: K, event: TMap[K]): void {
    const set = this.#listeners.get(name);
    if (set === undefined) return;
    for (const listener of [...set]) {
      try {
        (listener as (event: TMap[K]) => void)(event);
      } catch (error) {
        this.#logger().error('a lifecycle event listener threw; it was skipped', { event: String(name), error });
      }
    }
  }
}
