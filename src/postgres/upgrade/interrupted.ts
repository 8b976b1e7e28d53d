import { type RelayBusError, SchemaMismatchError, StoreUnavailableError } from '../../core/errors.js';

/**
 * What a 0.1 upgrade that failed after its first commit says: which of its steps committed, which
 * one rolled back, the state the schema is in, and how to resume. Every step is idempotent and the
 * 0.1 marker (deliveries.lease_token) goes only when the final step commits, so running the upgrade
 * again resumes it: it checks the layout again, re-runs the first step (a no-op), converts only the
 * deliveries still to convert, then runs the final step.
 */

/** Where a running 0.1 upgrade is: updated by setup() as each of its transactions commits. */
export interface UpgradeProgress {
  /** The step running now (or that failed). */
  step: 'prepare' | 'convert' | 'finish';
  /** The first transaction committed (columns added, 0.1 indexes dropped, new tables created). */
  prepared: boolean;
  /** Conversion batches committed, the deliveries they read, and the completed ones they moved to the history. */
  batches: number;
  converted: number;
  moved: number;
  /** Deliveries the schema held when the upgrade began. */
  total: number;
}

export function startProgress(total: number): UpgradeProgress {
  return { step: 'prepare', prepared: false, batches: 0, converted: 0, moved: 0, total };
}

const n = (value: number): string => value.toLocaleString('en-US');

/** The committed steps, in words, in order. */
export function committedSteps(progress: UpgradeProgress): string[] {
  const steps: string[] = [];
  if (progress.prepared)
    steps.push(
      'step 1 (events.handlers, deliveries.lane and deliveries.claims added, the 0.1 secondary indexes of deliveries dropped, the new tables and the SQL lane function created)',
    );
  if (progress.batches > 0)
    steps.push(
      `step 2, ${n(progress.batches)} batch${progress.batches === 1 ? '' : 'es'} (${n(progress.converted)} of ${n(progress.total)} deliveries given their lane, ` +
        `${n(progress.moved)} completed ones moved to the completion history)`,
    );
  return steps;
}

const STEP_WORDS: Readonly<Record<UpgradeProgress['step'], string>> = {
  prepare: 'step 1 (one transaction)',
  convert: 'a batch of step 2',
  finish: 'the final step (one transaction)',
};

/** The schema's state in one sentence, for an error raised after some steps committed. */
export function upgradeState(progress: UpgradeProgress): string {
  const committed = committedSteps(progress);
  if (committed.length === 0) return 'The upgrade changed nothing.';
  return (
    `The upgrade had committed ${committed.join(' and ')}; ${STEP_WORDS[progress.step]} rolled back as a whole. ` +
    'The schema still has the 0.1 layout (deliveries.lease_token) with those changes: the 0.1 tables keep every row, ' +
    'completed ones aside, which are in relaybus_completed_deliveries.'
  );
}

/** A 0.1 upgrade failed after some of its steps committed. `committed` lists them; run the upgrade again to resume. */
export class UpgradeInterruptedError extends StoreUnavailableError {
  readonly committed: readonly string[];
  readonly failedStep: UpgradeProgress['step'];
  constructor(schema: string, progress: UpgradeProgress, cause: RelayBusError) {
    super(
      `The relaybus 0.1 upgrade of schema "${schema}" stopped in ${STEP_WORDS[progress.step]}: ${cause.message} ` +
        `${upgradeState(progress)} To resume, ${cause.retryable ? '' : 'remove the cause, then '}run relaybus upgrade ` +
        '(or setup()) again: every step is idempotent, so it checks the layout again, converts only the deliveries ' +
        'still to convert and runs the final step.',
      { cause, retryable: cause.retryable },
    );
    this.committed = committedSteps(progress);
    this.failedStep = progress.step;
  }
}

/**
 * The error of a failed upgrade: as it is when nothing had committed or it already says the state (a refusal),
 * else an `UpgradeInterruptedError` around `error` (already a `RelayBusError`, see setup.ts's setupError).
 */
export function upgradeFailure(error: RelayBusError, schema: string, progress: UpgradeProgress): RelayBusError {
  if (!progress.prepared || error instanceof SchemaMismatchError) return error;
  return new UpgradeInterruptedError(schema, progress, error);
}
