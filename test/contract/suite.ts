/**
 * The store contract suite: one set of cases that every store (and every driver of a store) must
 * pass. A runner file is one line: `await describeStoreContract(someTarget)`.
 *
 * - The target's `probe()` decides whether the suite runs here; when it cannot, the whole suite is
 *   registered as skipped with the reason, so it never passes silently.
 * - One harness per file (opened in `before`, reset before each case, closed in `after`).
 * - A case that needs a capability the target lacks is registered as skipped with the reason.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import type { ContractTarget, Harness } from '../support/harness.js';
import { adminCases } from './cases/admin.cases.js';
import { cancelCases } from './cases/cancel.cases.js';
import { claimCases } from './cases/claim.cases.js';
import { completionCases } from './cases/completion.cases.js';
import { fencingCases } from './cases/fencing.cases.js';
import { pauseCases } from './cases/pause.cases.js';
import { livenessCases } from './cases/liveness.cases.js';
import type { CaseGroup, ContractCase } from './cases/kit.js';
import { orderingCases } from './cases/ordering.cases.js';
import { publishCases } from './cases/publish.cases.js';
import { replayCases } from './cases/replay.cases.js';
import { replayRunCases } from './cases/replay-runs.cases.js';
import { retryCases } from './cases/retry.cases.js';
import { ridingCases } from './cases/riding.cases.js';
import { shutdownCases } from './cases/shutdown.cases.js';
import { subscriptionCases } from './cases/subscriptions.cases.js';

export const contractGroups: readonly CaseGroup[] = [
  publishCases,
  claimCases,
  fencingCases,
  completionCases,
  retryCases,
  orderingCases,
  livenessCases,
  ridingCases,
  shutdownCases,
  adminCases,
  cancelCases,
  pauseCases,
  subscriptionCases,
  replayCases,
  replayRunCases,
];

/** Why a case cannot run on this target, or undefined when it can. */
function missingCapability<TTx>(target: ContractTarget<TTx>, testCase: ContractCase): string | undefined {
  const missing = (testCase.needs ?? []).filter((capability) => !target.capabilities[capability]);
  return missing.length === 0 ? undefined : `${target.name}: no ${missing.join(', no ')}`;
}

export async function describeStoreContract<TTx>(target: ContractTarget<TTx>): Promise<void> {
  const skip = await target.probe();
  describe(target.name, skip === undefined ? {} : { skip }, () => {
    let harness: Harness<TTx> | undefined;
    const current = (): Harness<TTx> => {
      if (!harness) throw new Error(`${target.name}: the harness did not open`);
      return harness;
    };
    before(async () => {
      harness = await target.open();
    });
    beforeEach(async () => {
      await current().reset();
    });
    after(async () => {
      await harness?.close();
    });

    for (const group of contractGroups) {
      describe(group.area, () => {
        for (const testCase of group.cases) {
          const reason = missingCapability(target, testCase);
          it(testCase.name, reason === undefined ? {} : { skip: reason }, () =>
            testCase.run({ harness: current(), target }),
          );
        }
      });
    }
  });
}
