import { SchemaMismatchError } from '../core/errors.js';
import type { RowOf } from './rows.js';
import type { SqlExecutor } from './sql-client.js';
import { DEFAULT_SCHEMA } from './schema-sql.js';
import { quoteIdentifier, type Statements } from './statements.js';

/** The error for a schema without the relaybus tables; `detail` says what was missing. It names the command to run. */
export function missingSchemaError(schema: string, detail: string, cause?: unknown): SchemaMismatchError {
  return new SchemaMismatchError(
    `The relaybus tables are missing in schema "${schema}" (${detail}). Run \`${command('setup', schema)}\` (or setup() in code; ` +
      'bus.start() runs it unless setupStore is false), or apply the DDL of `npx relaybus sql` / createPostgresSchemaSql().',
    cause === undefined ? undefined : { cause },
  );
}

/** A relaybus command line for `schema` (its --schema flag unless it is the default). */
function command(name: string, schema: string): string {
  return schema === DEFAULT_SCHEMA ? `npx relaybus ${name}` : `npx relaybus ${name} --schema ${schema}`;
}

/** The statements publish may run: the relations they name are the ones the probe looks for. */
const PUBLISH_STATEMENTS = ['publish', 'publish-new', 'publish-new-one', 'publish-undo'] as const;

/**
 * A publish into a schema without the relaybus tables fails with 42P01, which aborts the caller's transaction. So
 * until a store has seen its tables, each publish first reads the catalog in the caller's transaction (a statement
 * that cannot fail) and refuses with a `SchemaMismatchError` while the transaction is still usable. Once the tables
 * are found (or setup() succeeded) the probe never runs again: publish pays nothing after its first success.
 */
export class PublishProbe {
  #found = false;
  readonly #relations: readonly string[];

  constructor(
    private readonly schema: string,
    statements: Statements,
  ) {
    const prefix = `${quoteIdentifier(schema)}.`;
    const names = new Set<string>();
    for (const name of PUBLISH_STATEMENTS) {
      for (const match of statements[name].text.matchAll(/"[^"]+"\.(relaybus_\w+)/g)) {
        if (match[0].startsWith(prefix)) names.add(match[1]!);
      }
    }
    this.#relations = [...names].sort();
  }

  /** The tables exist (setup() just made them): no probe needed. */
  markFound(): void {
    this.#found = true;
  }

  /** Before a publish: throws a `SchemaMismatchError` when its tables are missing, leaving `executor`'s transaction usable. */
  async check(
    executor: SqlExecutor,
    run: (executor: SqlExecutor, params: readonly unknown[]) => Promise<RowOf<'publish-probe'>[]>,
  ): Promise<void> {
    if (this.#found) return;
    const [row] = await run(executor, [this.schema, this.#relations]);
    if (row === undefined) return;
    if (row.missing.length > 0) {
      throw missingSchemaError(
        this.schema,
        `no ${row.missing.join(', ')}; nothing was written, your transaction is still usable`,
      );
    }
    if (row.row_lease) {
      throw new SchemaMismatchError(
        `Schema "${this.schema}" has the tables of relaybus 0.1 (row leases): this version cannot publish into them ` +
          `until they are upgraded. Stop the 0.1 workers and run \`${command('upgrade', this.schema)}\` (with --dry-run ` +
          'first to see the plan). Nothing was written; your transaction is still usable.',
      );
    }
    this.#found = true;
  }
}
