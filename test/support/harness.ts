import type { Store, StoreCapabilities } from '../../src/store/contract.js';
import { StubClock } from './clock.js';

/** Options a contract case may ask of a fresh store. */
export interface HarnessOptions {
  readonly completionHistory?: boolean;
}

/** One store under test, isolated from every other test file (own schema, database or instance). */
export interface Harness<TTx> {
  readonly store: Store<TTx>;
  readonly clock: StubClock;
  /** Run `fn` in a transaction of the store's driver; commits unless it throws or `rollback` is set. */
  inTransaction<T>(fn: (tx: TTx) => Promise<T>, options?: { rollback?: boolean }): Promise<T>;
  /** Empty every table (between tests). */
  reset(): Promise<void>;
  close(): Promise<void>;
}

/** A store implementation (and driver) the contract suite runs against. */
export interface ContractTarget<TTx> {
  readonly name: string;
  readonly capabilities: StoreCapabilities;
  /** undefined when runnable here; otherwise the reason the suite is skipped. */
  probe(): Promise<string | undefined>;
  open(options?: HarnessOptions): Promise<Harness<TTx>>;
}

class Rollback extends Error {}

/** harness.inTransaction over store.transaction: commits, or rolls back on request by throwing. */
export function transactionRunner<TTx>(store: { transaction<T>(fn: (tx: TTx) => Promise<T>): Promise<T> }) {
  return async <T>(fn: (tx: TTx) => Promise<T>, options: { rollback?: boolean } = {}): Promise<T> => {
    let result: { value: T } | undefined;
    try {
      await store.transaction(async (tx) => {
        result = { value: await fn(tx) };
        if (options.rollback) throw new Rollback('rollback requested by the test');
      });
    } catch (error) {
      if (!(error instanceof Rollback)) throw error;
    }
    return result!.value;
  };
}

export { StubClock };
