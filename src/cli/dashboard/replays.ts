import { InvalidInputError } from '../../core/errors.js';
import type { Store } from '../../store/contract.js';
import { isUndriven, replayJson, runningReplays, type ReplayJson } from '../replay-views.js';

/**
 * The dashboard's running replays: what `/api/overview` sends (`replays`), the cancel action behind the same
 * token and CSRF checks as pause, and the section of the page and its script (inserted into page.ts's).
 */

/** A running replay as the overview sends it: `undriven` when it has not moved for a minute. */
export interface RunningReplayJson extends ReplayJson {
  readonly undriven: boolean;
}

/** The running replays for the overview; empty for a schema older than the replays table. */
export async function overviewReplays(
  store: Pick<Store<unknown>, 'listReplays'>,
  at: Date,
): Promise<RunningReplayJson[]> {
  const replays = (await runningReplays(store)) ?? [];
  return replays.map((view) => ({ ...replayJson(view), undriven: isUndriven(view, at.getTime()) }));
}

/** The replay id of a cancel POST body `{ replayId }`; throws `InvalidInputError` (400) otherwise. */
export function replayIdParam(body: unknown): string {
  if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
    const { replayId } = body as { replayId?: unknown };
    if (Object.keys(body).length === 1 && typeof replayId === 'string' && /^[1-9]\d{0,18}$/.test(replayId))
      return replayId;
  }
  throw new InvalidInputError('the body must be {"replayId": "<id>"}: a replay id as decimal text');
}

/** The page's section (filled by `REPLAYS_JS`). */
export const REPLAYS_SECTION = `<section>
<h2>Running replays</h2>
<p class="muted">While a replay runs, the live keyed deliveries of its handlers wait, so each key's history comes first. <code>relaybus replay list</code> shows every replay.</p>
<p id="replay-result" class="muted" role="status"></p>
<table id="replays">
<thead><tr><th class="num">replay</th><th>mode</th><th>handlers</th><th class="num">created</th><th>by</th><th>updated</th><th></th></tr></thead>
<tbody></tbody>
</table>
</section>`;

/** The page script's part that draws the replays (uses the helpers of page.ts's script: el, cell, clear, ago, post). */
export const REPLAYS_JS = `
  function renderReplays(replays) {
    var tbody = document.querySelector('#replays tbody');
    clear(tbody);
    (replays || []).forEach(function (replay) {
      var row = el('tr');
      row.setAttribute('data-replay', replay.id);
      cell(row, replay.id, 'num');
      cell(row, replay.mode, 'text');
      cell(row, replay.handlers.join(', '), 'text');
      cell(row, replay.created + '/' + replay.total, 'num', 'progress');
      cell(row, replay.requestedBy === null ? '-' : replay.requestedBy, 'text');
      cell(row, ago(replay.updatedAt) + (replay.undriven ? ': nobody drives it (relaybus replay resume ' + replay.id + ')' : ''), replay.undriven ? 'error' : '', 'updated');
      var action = el('td');
      var button = el('button', 'Cancel', 'quiet');
      button.type = 'button';
      button.setAttribute('data-cancel-replay', replay.id);
      button.title = 'stop the replay: the deliveries it created stay; live deliveries run again';
      button.addEventListener('click', function () {
        button.disabled = true;
        post('/api/replay/cancel', { replayId: replay.id }).then(function () {
          document.getElementById('replay-result').textContent = 'cancelled replay ' + replay.id;
          return refresh();
        }, function (error) {
          button.disabled = false;
          status('cancel failed: ' + error.message);
        });
      });
      action.appendChild(button);
      row.appendChild(action);
      tbody.appendChild(row);
    });
    if (!replays || replays.length === 0) {
      var empty = el('tr');
      cell(empty, 'no running replay', 'muted').colSpan = 7;
      tbody.appendChild(empty);
    }
  }
`;
