/**
 * How a claim takes lanes, shared by every store so they all take the same number (the contract suite pins the
 * behaviour, not the numbers, but two stores that disagree here behave differently under load).
 *
 * While the held lanes do not fill the batch, a claim takes free (or expired) lanes with due work in rounds of
 * `acquireRounds()`: 32, 64, 128, ... lanes (or from what the owner's last claim took), at most `MAX_ACQUIRE_ROUNDS`
 * rounds. A claim with `acquireWhenFull` whose held lanes fill the batch takes one round of `TAKEOVER_ROUND` lanes
 * (see `ClaimParams.acquireWhenFull`).
 */
import { LANE_COUNT } from '../core/lanes.js';

/** Lanes a claim whose held lanes fill its batch takes anyway: a busy worker only needs to notice crashed lanes. */
export const TAKEOVER_ROUND = 4;

/**
 * Lanes taken in the first round when the owner's last claim took none (a worker's first claim, or one after an idle
 * spell). Each round is an acquire and a claim statement, and a worker's first claim runs before anything else it does:
 * starting from 4 lanes, a deep keyed backlog took several rounds before the first batch was full, about doubling the
 * time to the first handler; from 32 it takes one. Acquiring takes only lanes with due work, so a shallow queue is
 * taken the same either way.
 */
export const FIRST_ACQUIRE_ROUND = 32;

/** Rounds of taking lanes in one claim (up to every lane at a time). */
export const MAX_ACQUIRE_ROUNDS = 8;

/**
 * The number of lanes to take in each round, doubling up to every lane: from what the owner's last claim took in all
 * (`lastTaken`, at least `TAKEOVER_ROUND`), or `FIRST_ACQUIRE_ROUND` when it took none. A backlog that drains each lane
 * within a claim or two (followers read a key's whole run) hands back and takes lanes in every claim, and rounds from 4
 * up cost an acquire and a claim statement each.
 */
export function* acquireRounds(lastTaken?: number): Generator<number, void, undefined> {
  const first = lastTaken === undefined ? FIRST_ACQUIRE_ROUND : Math.max(TAKEOVER_ROUND, Math.floor(lastTaken));
  for (
    let round = 0, take = Math.min(first, LANE_COUNT);
    round < MAX_ACQUIRE_ROUNDS;
    round += 1, take = Math.min(take * 2, LANE_COUNT)
  ) {
    yield take;
  }
}
