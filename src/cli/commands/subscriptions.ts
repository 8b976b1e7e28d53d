import type { SubscriptionView } from '../../index.js';
import { SUBSCRIPTION_REFRESH_MS } from '../../bus/subscription-keeper.js';
import { DATABASE_FLAGS, HELP_FLAG, JSON_FLAG, parseFlags, renderHelp, VERBOSE_FLAG, type FlagSpecs } from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { CliFailure, ExitCode, UsageError, writeLine, type CliContext, type Command } from '../command.js';
import { formatDuration } from '../duration.js';
import { renderTable, type Column } from '../table.js';

/**
 * `relaybus subscriptions list` and `relaybus subscriptions remove <handler>`: the handlers every
 * publish fans out to (recorded by started buses and `relaybus setup --subscriptions`), and how to
 * retire one without dropping its pending deliveries silently.
 */

/**
 * A subscription no worker has refreshed for this long is stale: running buses refresh theirs every
 * `SUBSCRIPTION_REFRESH_MS`, so three missed refreshes mean no worker runs the handler any more.
 */
export const STALE_AFTER_MS = 3 * SUBSCRIPTION_REFRESH_MS;

/** True when no worker said it runs the subscription's handler within `STALE_AFTER_MS` of `now` (or none ever did). */
export function isStale(subscription: Pick<SubscriptionView, 'seenAt'>, now: number): boolean {
  return subscription.seenAt === null || now - subscription.seenAt.getTime() > STALE_AFTER_MS;
}

const LIST_FLAGS = { ...JSON_FLAG, ...DATABASE_FLAGS, ...VERBOSE_FLAG, ...HELP_FLAG } as const satisfies FlagSpecs;

const REMOVE_FLAGS = {
  'event-type': {
    type: 'string',
    value: 'type',
    description: "remove: only the handler's subscription to this event type. Default: every type it subscribes to.",
  },
  'bury-pending': {
    type: 'string',
    value: 'reason',
    description:
      "remove: move the handler's pending deliveries (of those types) to the dead letters with this reason as their error. Without it, remove is refused while any is pending.",
  },
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

type Row = SubscriptionView & { readonly now: number };

function seenAgo(subscription: SubscriptionView, now: number): string {
  // A worker's clock may run slightly ahead of this one: never print a negative age.
  return subscription.seenAt === null
    ? 'never'
    : `${formatDuration(Math.max(0, now - subscription.seenAt.getTime()))} ago`;
}

const COLUMNS: readonly Column<Row>[] = [
  { header: 'event type', value: (s) => s.eventType, shrink: true },
  { header: 'handler', value: (s) => s.handler },
  { header: 'max attempts', align: 'right', value: (s) => String(s.maxAttempts) },
  { header: 'pending', align: 'right', value: (s) => String(s.pending) },
  { header: 'last seen', align: 'right', value: (s) => seenAgo(s, s.now) },
  { header: '', value: (s) => (isStale(s, s.now) ? 'stale' : '') },
];

function viewJson(subscription: SubscriptionView, now: number): Record<string, unknown> {
  return {
    eventType: subscription.eventType,
    handler: subscription.handler,
    maxAttempts: subscription.maxAttempts,
    retry: subscription.retry,
    pending: subscription.pending,
    createdAt: subscription.createdAt.toISOString(),
    updatedAt: subscription.updatedAt.toISOString(),
    seenAt: subscription.seenAt?.toISOString() ?? null,
    stale: isStale(subscription, now),
  };
}

async function list(args: readonly string[], context: CliContext): Promise<number> {
  const { values } = parseFlags('subscriptions list', args, LIST_FLAGS);
  return withAdminStore(values, context, async ({ store, schema }) => {
    const subscriptions = await store.listSubscriptions();
    const now = Date.now();
    if (values.json) {
      writeLine(
        context.stdout,
        JSON.stringify(
          subscriptions.map((subscription) => viewJson(subscription, now)),
          null,
          2,
        ),
      );
      return ExitCode.ok;
    }
    if (subscriptions.length === 0) {
      writeLine(
        context.stdout,
        `no subscriptions in schema "${schema}": no worker has started here, and relaybus setup --subscriptions <config> was not run`,
      );
      return ExitCode.ok;
    }
    const columns = context.stdout.columns;
    const width = context.stdout.isTTY && columns !== undefined && columns >= 40 ? columns : 160;
    for (const line of renderTable(
      COLUMNS,
      subscriptions.map((subscription) => ({ ...subscription, now })),
      width,
    ))
      writeLine(context.stdout, line);
    const stale = subscriptions.filter((subscription) => isStale(subscription, now)).length;
    writeLine(context.stdout, '');
    writeLine(
      context.stdout,
      `${subscriptions.length} subscription${subscriptions.length === 1 ? '' : 's'}` +
        (stale === 0
          ? ''
          : `, ${stale} stale: no worker said it runs the handler in the last ${formatDuration(STALE_AFTER_MS)} (running workers refresh every ${formatDuration(SUBSCRIPTION_REFRESH_MS)})`),
    );
    return ExitCode.ok;
  });
}

async function remove(args: readonly string[], context: CliContext): Promise<number> {
  const { values, positionals } = parseFlags('subscriptions remove', args, REMOVE_FLAGS, { maxPositionals: 1 });
  const handler = positionals[0];
  if (handler === undefined || handler.trim() === '') {
    throw new UsageError(
      'subscriptions remove needs the handler name: relaybus subscriptions remove <handler> (relaybus subscriptions list shows them)',
    );
  }
  const eventType = values['event-type'];
  const buryPending = values['bury-pending'];
  if (buryPending !== undefined && buryPending.trim() === '') {
    throw new UsageError(
      '--bury-pending needs a reason (it becomes the dead letters\' error), e.g. --bury-pending "handler retired"',
    );
  }
  const what = `handler "${handler}"${eventType === undefined ? '' : ` for event type "${eventType}"`}`;
  return withAdminStore(values, context, async ({ store, schema }) => {
    // Only to say which subscriptions go (and whether a worker still runs them); unsubscribe decides.
    const now = Date.now();
    const before = (await store.listSubscriptions()).filter(
      (subscription) =>
        subscription.handler === handler && (eventType === undefined || subscription.eventType === eventType),
    );
    // An InvalidStateError (deliveries pending without --bury-pending, or in flight) changed nothing:
    // main prints its message, which names the count and the flag to pass, and exits 1.
    const result = await store.unsubscribe({
      handler,
      ...(eventType === undefined ? {} : { eventType }),
      ...(buryPending === undefined ? {} : { buryPending }),
    });
    if (result.removed === 0 && result.buried === 0) {
      throw new CliFailure(
        `nothing was subscribed: ${what} has no subscription in schema "${schema}"; nothing changed (relaybus subscriptions list shows them)`,
      );
    }
    const eventTypes = before.length === result.removed ? before.map((subscription) => subscription.eventType) : [];
    if (values.json) {
      writeLine(
        context.stdout,
        JSON.stringify({
          handler,
          eventType: eventType ?? null,
          removed: result.removed,
          buried: result.buried,
          eventTypes,
        }),
      );
      return ExitCode.ok;
    }
    const removedText =
      result.removed === 0
        ? `${what} had no subscription`
        : `removed ${result.removed} subscription${result.removed === 1 ? '' : 's'} of ${what}${eventTypes.length > 0 ? ` (${eventTypes.join(', ')})` : ''}`;
    const buriedText =
      result.buried === 0
        ? ''
        : `; buried ${result.buried} pending deliver${result.buried === 1 ? 'y' : 'ies'} with the reason "${buryPending}" (relaybus dead list --handler ${handler} shows them)`;
    writeLine(context.stdout, `${removedText}${buriedText}`);
    if (before.some((subscription) => !isStale(subscription, now))) {
      writeLine(
        context.stdout,
        `note: a worker ran this handler within the last ${formatDuration(STALE_AFTER_MS)}; if it still does, it subscribes it again at its next refresh (every ${formatDuration(SUBSCRIPTION_REFRESH_MS)}): deploy the workers without the handler first`,
      );
    }
    return ExitCode.ok;
  });
}

const SUBCOMMANDS: Readonly<Record<string, (args: readonly string[], context: CliContext) => Promise<number>>> = {
  list,
  remove,
};

/** `relaybus subscriptions list` and `relaybus subscriptions remove`. */
export const subscriptionsCommand: Command = {
  name: 'subscriptions',
  summary: 'List the handlers publishes fan out to (subscriptions), or remove one.',
  help: renderHelp({
    usage: [
      'relaybus subscriptions list [--json] [options]',
      'relaybus subscriptions remove <handler> [--event-type <type>] [--bury-pending <reason>]',
    ],
    description:
      'Every publish fans out to the subscriptions of its event type, whichever process publishes. A started bus records its handlers as subscriptions and refreshes them every ' +
      `${formatDuration(SUBSCRIPTION_REFRESH_MS)}; relaybus setup --subscriptions <config> records them from a deploy step. ` +
      `list shows each subscription with its pending deliveries and when a worker last said it runs the handler; "stale" marks the ones no worker refreshed in the last ${formatDuration(STALE_AFTER_MS)} (or ever). ` +
      "remove deletes a retired handler's subscriptions so new events no longer get a delivery for it. It never drops deliveries silently: while the handler has pending deliveries it is refused unless --bury-pending moves them to the dead letters, and it is always refused while a worker runs one. Deploy the workers without the handler first, or they subscribe it again.",
    flags: REMOVE_FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: [
          '0  listed; removed (and buried)',
          '1  remove refused (deliveries pending without --bury-pending, or in flight),',
          '   nothing changed; or nothing was subscribed for the handler (or type);',
          '   or the database failed',
          '2  usage error',
        ],
      },
      {
        title: 'Examples',
        lines: [
          'relaybus subscriptions list',
          "relaybus subscriptions list --json | jq '.[] | select(.stale)'",
          'relaybus subscriptions remove send-fax',
          'relaybus subscriptions remove send-fax --event-type order.placed --bury-pending "fax retired"',
        ],
      },
    ],
  }),
  async run(args, context) {
    const [subcommand, ...rest] = args;
    if (subcommand === undefined || subcommand.startsWith('-')) {
      throw new UsageError(
        'relaybus subscriptions needs a subcommand: list or remove (see relaybus subscriptions --help)',
      );
    }
    const run = Object.hasOwn(SUBCOMMANDS, subcommand) ? SUBCOMMANDS[subcommand] : undefined;
    if (run === undefined)
      throw new UsageError(
        `unknown command "subscriptions ${subcommand}"; use relaybus subscriptions list or relaybus subscriptions remove`,
      );
    return run(rest, context);
  },
};
