/** What the replay contract cases share: subscribing, the replay parameters, stepping, running one delivery. */
import assert from 'node:assert/strict';
import type { ReplayParams, ReplayStepResult, ReplayView } from '../../../src/store/contract.js';
import type { Harness } from '../../support/harness.js';
import { allDeliveries, claimExpecting, H1, H2, leaseOf, pause } from './kit.js';

export const TYPE = 'test.event';
export const OTHER = 'other.event';

export async function subscribe<TTx>(harness: Harness<TTx>, handler: string, maxAttempts = 4, eventType = TYPE) {
  await harness.store.subscribe([{ eventType, handler, maxAttempts }], { now: harness.clock.now() });
}

export async function remaining<TTx>(harness: Harness<TTx>): Promise<string[]> {
  return (await allDeliveries(harness)).map((d) => `${d.eventId}/${d.handler}:${d.status}`).sort();
}

export function backfill(overrides: Partial<ReplayParams> = {}): ReplayParams {
  return { mode: 'backfill', handlers: [H2], ...overrides };
}

export function redrive(overrides: Partial<ReplayParams> = {}): ReplayParams {
  return { mode: 'redrive', handlers: [H1], ...overrides };
}

export async function start<TTx>(harness: Harness<TTx>, params: ReplayParams): Promise<ReplayView> {
  return harness.store.startReplay({ now: harness.clock.now(), ...params });
}

export async function step<TTx>(harness: Harness<TTx>, replayId: string, limit?: number): Promise<ReplayStepResult> {
  return harness.store.replayStep({ replayId, now: harness.clock.now(), ...(limit === undefined ? {} : { limit }) });
}

/**
 * Step until the replay is no longer running. A store may drain for a while after its deliveries are done (it waits
 * for transactions that were open at the start, other sessions' included), so waiting steps are retried briefly.
 */
export async function stepToEnd<TTx>(harness: Harness<TTx>, replayId: string): Promise<ReplayStepResult> {
  for (let attempt = 0; attempt < 400; attempt += 1) {
    const result = await step(harness, replayId, 100);
    if (result.replay.state !== 'running') return result;
    if (result.waiting !== undefined) await pause(25);
  }
  assert.fail(`replay ${replayId} did not finish`);
}

/** Claim one delivery of `handler`, expect `eventId`, complete it. */
export async function runOne<TTx>(harness: Harness<TTx>, handler: string, eventId: string): Promise<void> {
  const [claimed] = await claimExpecting(harness, 'w1', [eventId], { handlers: [handler], limit: 1 });
  assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
}
