/**
 * How a claim takes lanes, shared by every store so they all take the same number (the contract suite pins the
 * behaviour, not the numbers, but two stores that disagree here behave differently under load).
 *
 * While the held lanes do not fill the batch, a claim takes free (or expired) lanes with due work in rounds of
 * `acquireRounds()`: 4, 8, 16, ... lanes, at most `MAX_ACQUIRE_ROUNDS` rounds. A claim with `takeover` whose held
 * lanes fill the batch takes one round of `FIRST_ACQUIRE_ROUND` lanes (see `ClaimParams.takeover`).
 */
import { LANE_COUNT } from '../core/lanes.js';

/** Lanes taken in the first round, and by a takeover. Small: a busy worker only needs to notice crashed lanes. */
export const FIRST_ACQUIRE_ROUND = 4;

/** Rounds of taking lanes in one claim (4, 8, ..., 256 lanes at a time). */
export const MAX_ACQUIRE_ROUNDS = 8;

/** The number of lanes to take in each round, doubling from `FIRST_ACQUIRE_ROUND` up to every lane. */
export function* acquireRounds(): Generator<number, void, undefined> {
  for (
    let round = 0, take = FIRST_ACQUIRE_ROUND;
    round < MAX_ACQUIRE_ROUNDS;
    round += 1, take = Math.min(take * 2, LANE_COUNT)
  ) {
    yield take;
  }
}
