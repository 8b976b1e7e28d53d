import type { DeliveryView } from '../../index.js';
import {
  DATABASE_FLAGS,
  HELP_FLAG,
  integerFlag,
  JSON_FLAG,
  parseFlags,
  renderHelp,
  VERBOSE_FLAG,
  type FlagSpecs,
} from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { CliFailure, ExitCode, UsageError, writeLine, type CliContext, type Command } from '../command.js';
import { formatDuration } from '../duration.js';
import { writeTable, type Column } from '../table.js';

/**
 * `relaybus dead list` and `relaybus dead requeue`: inspect dead letters (deliveries whose handler
 * failed its last attempt) and move them back to pending with a fresh attempt budget.
 */

const MAX_LIST = 10_000;
const PAGE = 1_000;

const LIST_FLAGS = {
  handler: { type: 'string', value: 'name', description: 'Only dead deliveries of this handler.' },
  'event-id': { type: 'string', value: 'id', description: 'Only dead deliveries of this event.' },
  limit: { type: 'string', value: 'n', description: `Show at most n, 1..${MAX_LIST}. Default: 100.` },
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const REQUEUE_FLAGS = {
  id: { type: 'string', multiple: true, value: 'delivery-id', description: 'Requeue this dead delivery (repeatable).' },
  handler: { type: 'string', value: 'name', description: 'Requeue the dead deliveries of this handler.' },
  'event-id': { type: 'string', value: 'id', description: 'Requeue the dead deliveries of this event.' },
  all: { type: 'boolean', description: 'Requeue every dead delivery (needed when no other selector is given).' },
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const COLUMNS: readonly Column<DeliveryView & { readonly now: number }>[] = [
  { header: 'id', align: 'right', value: (d) => d.id },
  { header: 'handler', value: (d) => d.handler },
  { header: 'event', value: (d) => d.eventType },
  { header: 'event id', value: (d) => d.eventId },
  { header: 'key', value: (d) => d.key ?? '-' },
  { header: 'attempts', align: 'right', value: (d) => `${d.attempts}/${d.maxAttempts}` },
  { header: 'died', align: 'right', value: (d) => `${formatDuration(d.now - d.updatedAt.getTime())} ago` },
  { header: 'last error', value: (d) => d.lastError ?? '-', shrink: true },
];

function viewJson(delivery: DeliveryView): Record<string, unknown> {
  return {
    ...delivery,
    availableAt: delivery.availableAt.toISOString(),
    createdAt: delivery.createdAt.toISOString(),
    updatedAt: delivery.updatedAt.toISOString(),
  };
}

async function list(args: readonly string[], context: CliContext): Promise<number> {
  const { values } = parseFlags('dead list', args, LIST_FLAGS);
  const limit = integerFlag('limit', values.limit, 1, MAX_LIST) ?? 100;
  return withAdminStore(values, context, async ({ store, schema }) => {
    const items: DeliveryView[] = [];
    let cursor: string | undefined;
    let more = false;
    do {
      const page = await store.listDeliveries({
        status: 'dead',
        handler: values.handler,
        eventId: values['event-id'],
        limit: Math.min(PAGE, limit - items.length),
        cursor,
        // The table has no room for payloads; the JSON carries each one whole, with its headers.
        withPayload: values.json === true,
      });
      items.push(...page.items);
      cursor = page.nextCursor ?? undefined;
      more = cursor !== undefined;
    } while (more && items.length < limit);
    if (values.json) {
      writeLine(context.stdout, JSON.stringify(items.map(viewJson), null, 2));
      return ExitCode.ok;
    }
    if (items.length === 0) {
      writeLine(
        context.stdout,
        `no dead deliveries in schema "${schema}"${values.handler || values['event-id'] ? ' matching the filters' : ''}`,
      );
      return ExitCode.ok;
    }
    const now = Date.now();
    writeTable(
      context.stdout,
      COLUMNS,
      items.map((item) => ({ ...item, now })),
    );
    writeLine(context.stdout, '');
    writeLine(
      context.stdout,
      more
        ? `showing the first ${items.length} dead deliveries; more exist (raise --limit, or filter with --handler / --event-id)`
        : `${items.length} dead deliver${items.length === 1 ? 'y' : 'ies'}; requeue with: relaybus dead requeue --id <id> | --handler <name> | --event-id <id> | --all`,
    );
    return ExitCode.ok;
  });
}

async function requeue(args: readonly string[], context: CliContext): Promise<number> {
  const { values } = parseFlags('dead requeue', args, REQUEUE_FLAGS);
  const ids = values.id?.map((id) => {
    if (!/^[1-9]\d{0,18}$/.test(id))
      throw new UsageError(`--id must be a delivery id (digits, as relaybus dead list prints), got "${id}"`);
    return id;
  });
  if (ids === undefined && values.handler === undefined && values['event-id'] === undefined && !values.all) {
    throw new UsageError(
      'dead requeue needs a selector: --id <delivery-id>, --handler <name>, --event-id <id>, or --all',
    );
  }
  return withAdminStore(values, context, async ({ store, schema }) => {
    const count = await store.requeue({
      ...(ids ? { deliveryIds: ids } : {}),
      ...(values.handler !== undefined ? { handler: values.handler } : {}),
      ...(values['event-id'] !== undefined ? { eventId: values['event-id'] } : {}),
      ...(values.all ? { all: true } : {}),
    });
    if (values.json) writeLine(context.stdout, JSON.stringify({ requeued: count }));
    else if (count > 0 || ids === undefined)
      writeLine(
        context.stdout,
        count === 0
          ? 'no dead delivery matched; nothing requeued'
          : `requeued ${count} dead deliver${count === 1 ? 'y' : 'ies'}: pending again with a fresh attempt budget (keyed ones go to the end of their key's order)`,
      );
    // An --id names one delivery: one that is not dead (gone, never there, pending) is an error, not a no-op.
    const named = ids === undefined ? 0 : new Set(ids).size;
    if (count < named)
      throw new CliFailure(missedIds(ids ?? [], named, count, schema, values.handler, values['event-id']));
    return ExitCode.ok;
  });
}

/** Why `dead requeue --id ...` fails when fewer deliveries were requeued than ids were named. */
function missedIds(
  ids: readonly string[],
  named: number,
  requeued: number,
  schema: string,
  handler: string | undefined,
  eventId: string | undefined,
): string {
  const missing = named - requeued;
  const filters = handler !== undefined || eventId !== undefined ? ' matching --handler/--event-id' : '';
  const which =
    named === 1
      ? `no dead delivery with id ${ids[0]}${filters} in schema "${schema}"`
      : `${missing} of the ${named} --id values matched no dead delivery${filters} in schema "${schema}" (${requeued} requeued)`;
  return `${which}: the delivery does not exist, completed, or is not dead (pending, or requeued already); relaybus dead list shows the dead ones`;
}

const LIST_EXIT_LINES = ['0  done (also when nothing matched)', '1  the database failed', '2  usage error'];
const REQUEUE_EXIT_LINES = [
  '0  requeued, or --handler / --event-id / --all matched no dead delivery',
  '1  an --id is not a dead delivery (the others were requeued), or the database failed',
  '2  usage error',
];

/** `relaybus dead list`. */
export const deadListCommand: Command = {
  name: 'dead list',
  summary: 'List dead deliveries (out of attempts) with their last error.',
  help: renderHelp({
    usage: ['relaybus dead list [options]'],
    description:
      'List dead deliveries in delivery id order (the order they were written in): deliveries whose handler failed its last attempt. They stay until requeued (relaybus dead requeue) or purged (relaybus purge --dead-retention). With --json each one carries its event\'s "payload" and "headers" as well.',
    flags: LIST_FLAGS,
    sections: [
      { title: 'Exit codes', lines: LIST_EXIT_LINES },
      {
        title: 'Examples',
        lines: ['relaybus dead list --handler send-receipt', 'relaybus dead list --json --limit 1000 > dead.json'],
      },
    ],
  }),
  run: list,
};

/** `relaybus dead requeue`. */
export const deadRequeueCommand: Command = {
  name: 'dead requeue',
  summary: 'Move dead deliveries back to pending with a fresh attempt budget.',
  help: renderHelp({
    usage: [
      'relaybus dead requeue --id <delivery-id> [--id ...] [options]',
      'relaybus dead requeue --handler <name> | --event-id <id> | --all [options]',
    ],
    description:
      "Move dead deliveries back to pending, due now, with a fresh attempt budget. Selectors combine with AND (--handler a --event-id e requeues the dead deliveries of handler a for event e); --all alone requeues every dead delivery. A keyed delivery goes to the end of its key's order. Deploy the fix first: a requeued delivery runs again at once.",
    flags: REQUEUE_FLAGS,
    sections: [
      { title: 'Exit codes', lines: REQUEUE_EXIT_LINES },
      {
        title: 'Examples',
        lines: [
          'relaybus dead requeue --id 1234 --id 1235',
          'relaybus dead requeue --handler send-receipt',
          'relaybus dead requeue --all',
        ],
      },
    ],
  }),
  run: requeue,
};
