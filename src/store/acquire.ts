/**
 * How a claim takes lanes, shared by every store so they all take the same number (the contract suite pins the
 * behaviour, not the numbers, but two stores that disagree here behave differently under load).
 *
 * While the held lanes do not fill the batch, a claim takes free (or expired) lanes with due work in rounds of
 * `acquireRounds()`: 4, 8, 16, ... lanes (or from what the owner's last claim took), at most `MAX_ACQUIRE_ROUNDS`
 * rounds. A claim with `takeover` whose held lanes fill the batch takes one round of `FIRST_ACQUIRE_ROUND` lanes (see
 * `ClaimParams.takeover`).
 */
import { LANE_COUNT } from '../core/lanes.js';

/** Lanes taken in the first round, and by a takeover. Small: a busy worker only needs to notice crashed lanes. */
export const FIRST_ACQUIRE_ROUND = 4;

/** Rounds of taking lanes in one claim (4, 8, ..., 256 lanes at a time). */
export const MAX_ACQUIRE_ROUNDS = 8;

/**
 * The number of lanes to take in each round, doubling from `first` (at least `FIRST_ACQUIRE_ROUND`) up to every lane.
 * A store passes what the owner's last claim took in all: a backlog that drains each lane within a claim or two
 * (followers read a key's whole run) hands back and takes lanes in every claim, and rounds from 4 up cost an acquire
 * and a claim statement each (4, 8, 16 and 32 lanes in one claim, ad hoc, 50k keyed with followers).
 */
export function* acquireRounds(first = FIRST_ACQUIRE_ROUND): Generator<number, void, undefined> {
  for (
    let round = 0, take = Math.min(Math.max(FIRST_ACQUIRE_ROUND, Math.floor(first)), LANE_COUNT);
    round < MAX_ACQUIRE_ROUNDS;
    round += 1, take = Math.min(take * 2, LANE_COUNT)
  ) {
    yield take;
  }
}
