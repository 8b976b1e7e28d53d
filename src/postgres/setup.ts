import { loadMigrations, loadSupplement, asScript } from './schema-sql.js';
import type { PostgresDriver } from './sql-client.js';
import type { Statements } from './statements.js';

/**
 * setup(): create or upgrade the relaybus tables of one schema. Everything runs in one transaction
 * under an advisory lock keyed by the schema name, so several processes may call it at once: the
 * first applies what is missing, the others wait and then find nothing to do.
 */
export async function setupPostgres<TTx>(driver: PostgresDriver<TTx>, schema: string, statements: Statements): Promise<void> {
  const migrations = loadMigrations(schema);
  const supplement = asScript(loadSupplement(schema));
  await driver.transaction(async (tx) => {
    const executor = driver.unwrap(tx);
    await executor.run(statements['setup-lock'], [schema]);
    const [state] = await executor.run<{ installed: boolean }>(statements['setup-installed'], [schema]);
    const applied = new Set(
      state?.installed ? (await executor.run<{ name: string }>(statements['setup-applied'], [])).map((row) => row.name) : [],
    );
    for (const migration of migrations) {
      if (applied.has(migration.name)) continue;
      await executor.exec(asScript(migration.statements));
      await executor.run(statements['setup-record'], [migration.name]);
    }
    await executor.exec(supplement);
  });
}
