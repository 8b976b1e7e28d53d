import { SchemaMismatchError, type ReplayFilter, type ReplayView, type Store } from '../index.js';
import { formatDuration } from './duration.js';
import type { Column } from './table.js';

/**
 * How the operator views show replays: `relaybus replay list|show`, the running ones in `relaybus stats` and on the
 * dashboard. A running replay nobody drives is worth a warning: its handlers' live keyed deliveries wait behind it.
 */

/** A running replay whose `updatedAt` is older than this is flagged: no process seems to drive it. */
export const UNDRIVEN_AFTER_MS = 60_000;

/** A replay as JSON: dates as ISO text (filter dates too). */
export interface ReplayJson extends Omit<ReplayView, 'filter' | 'createdAt' | 'updatedAt' | 'finishedAt'> {
  readonly filter: Readonly<Record<string, unknown>>;
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly finishedAt: string | null;
}

/** `view` as JSON-ready data. */
export function replayJson(view: ReplayView): ReplayJson {
  const filter = Object.fromEntries(
    Object.entries(view.filter).map(([name, value]) => [name, value instanceof Date ? value.toISOString() : value]),
  );
  return {
    ...view,
    filter,
    createdAt: view.createdAt.toISOString(),
    updatedAt: view.updatedAt.toISOString(),
    finishedAt: view.finishedAt?.toISOString() ?? null,
  };
}

/** The filter in a few words: `types a,b since ... key k`; `every subscribed event` when empty. */
export function describeFilter(filter: ReplayFilter): string {
  const parts: string[] = [];
  if (filter.eventTypes !== undefined) parts.push(`types ${filter.eventTypes.join(',')}`);
  if (filter.since !== undefined) parts.push(`since ${filter.since.toISOString()}`);
  if (filter.until !== undefined) parts.push(`until ${filter.until.toISOString()}`);
  if (filter.fromEventId !== undefined) parts.push(`from id ${filter.fromEventId}`);
  if (filter.toEventId !== undefined) parts.push(`to id ${filter.toEventId}`);
  if (filter.key !== undefined) parts.push(`key ${filter.key}`);
  return parts.length === 0 ? 'every subscribed event' : parts.join(' ');
}

/** `created/total`, with thousands separators. */
export function replayProgress(view: ReplayView): string {
  return `${view.created.toLocaleString('en-US')}/${view.total.toLocaleString('en-US')}`;
}

/** True when `view` runs and has not moved for `UNDRIVEN_AFTER_MS`. */
export function isUndriven(view: ReplayView, now: number): boolean {
  return view.state === 'running' && now - view.updatedAt.getTime() > UNDRIVEN_AFTER_MS;
}

/** The columns of `relaybus replay list`. */
export const REPLAY_COLUMNS: readonly Column<ReplayView>[] = [
  { header: 'id', align: 'right', value: (view) => view.id },
  { header: 'mode', value: (view) => view.mode },
  { header: 'state', value: (view) => view.state },
  { header: 'handlers', value: (view) => view.handlers.join(',') },
  { header: 'created', align: 'right', value: replayProgress },
  { header: 'skipped', align: 'right', value: (view) => String(view.skipped) },
  { header: 'started', value: (view) => view.createdAt.toISOString() },
  { header: 'by', value: (view) => view.requestedBy ?? '-' },
  { header: 'reason', value: (view) => view.reason ?? '-', shrink: true },
];

/** `relaybus replay show`: one `name: value` line per field. */
export function replayLines(view: ReplayView, now: number): string[] {
  return [
    `replay ${view.id}: ${view.mode} of ${view.handlers.join(', ')}`,
    `state:        ${view.state}${isUndriven(view, now) ? ` (not moved for ${formatDuration(now - view.updatedAt.getTime())}: nobody drives it)` : ''}`,
    `filter:       ${describeFilter(view.filter)}`,
    `created:      ${replayProgress(view)} deliveries (skipped ${view.skipped})`,
    `requested by: ${view.requestedBy ?? '-'}`,
    `reason:       ${view.reason ?? '-'}`,
    `started:      ${view.createdAt.toISOString()}`,
    `updated:      ${view.updatedAt.toISOString()}`,
    `finished:     ${view.finishedAt?.toISOString() ?? '-'}`,
  ];
}

/** What resumes or stops replay `id`, for the messages of the CLI. */
export function resumeHint(id: string): string {
  return `relaybus replay resume ${id} drives it on, relaybus replay cancel ${id} stops it`;
}

/**
 * The running replays, or undefined for a schema older than the replays table (the views then show none).
 */
export async function runningReplays(store: Pick<Store<unknown>, 'listReplays'>): Promise<ReplayView[] | undefined> {
  try {
    return await store.listReplays({ state: 'running' });
  } catch (error) {
    if (error instanceof SchemaMismatchError) return undefined;
    throw error;
  }
}

/** The lines `relaybus stats` shows below its table about the running replays; none when there are none. */
export function runningReplaysNote(replays: readonly ReplayView[] | undefined, now: number): string[] {
  if (replays === undefined || replays.length === 0) return [];
  const lines = replays.map(
    (view) =>
      `replay ${view.id} (${view.mode} of ${view.handlers.join(', ')}) running: ${replayProgress(view)} created`,
  );
  const undriven = replays.filter((view) => isUndriven(view, now));
  if (undriven.length > 0)
    lines.push(
      `WARNING: ${undriven.map((view) => `replay ${view.id}`).join(', ')} has not moved for over ${formatDuration(UNDRIVEN_AFTER_MS)}: nobody drives it, and the live keyed deliveries of its handlers wait until it ends. ${undriven.map((view) => resumeHint(view.id)).join('; ')}.`,
    );
  return lines;
}
