import { memoryStore, type MemoryTransaction } from '../../src/memory/memory-store.js';
import type { Store } from '../../src/store/contract.js';
import { StubClock, transactionRunner, type ContractTarget, type Harness, type HarnessOptions } from './harness.js';

class MemoryHarness implements Harness<MemoryTransaction> {
  #store: Store<MemoryTransaction>;
  #clock = new StubClock();
  readonly #options: HarnessOptions;

  constructor(options: HarnessOptions) {
    this.#options = options;
    this.#store = this.#newStore();
  }

  get store(): Store<MemoryTransaction> {
    return this.#store;
  }

  get clock(): StubClock {
    return this.#clock;
  }

  inTransaction<T>(fn: (tx: MemoryTransaction) => Promise<T>, options: { rollback?: boolean } = {}): Promise<T> {
    return transactionRunner(this.#store)(fn, options);
  }

  /** Memory gets a new store (and clock) per test. */
  async reset(): Promise<void> {
    await this.#store.close();
    this.#store = this.#newStore();
    this.#clock = new StubClock();
  }

  async close(): Promise<void> {
    await this.#store.close();
  }

  #newStore(): Store<MemoryTransaction> {
    return memoryStore({ completionHistory: this.#options.completionHistory ?? false });
  }
}

export const memoryTarget: ContractTarget<MemoryTransaction> = {
  name: 'memory',
  capabilities: { transactions: true, completionHistory: true, wakeups: 'poll', concurrentConnections: false },
  probe: async () => undefined,
  open: async (options = {}) => new MemoryHarness(options),
};
