import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { createPostgresSchemaSql } from '../../src/postgres/schema-sql.js';
import { loadStatements, STATEMENT_FOLDERS, STATEMENT_NAMES, statementPath } from '../../src/postgres/statements.js';

const directory = new URL('../../sql/', import.meta.url);
/** Every statement file, as `<folder>/<name>.sql`: the folders of sql/ but fragments/. */
const files = readdirSync(directory, { recursive: true, encoding: 'utf8' })
  .filter((file) => file.endsWith('.sql') && !file.startsWith('fragments/'))
  .sort();
const nameOf = (file: string) => file.replace(/^.*\//, '').replace(/\.sql$/, '');

describe('sql/ statement files', () => {
  it('the statement registry lists exactly the files on disk, each in its folder', () => {
    assert.deepEqual([...STATEMENT_NAMES].sort(), files.map(nameOf).sort());
    assert.deepEqual(
      files,
      STATEMENT_NAMES.map((name) => statementPath(name).replace(/^sql\//, '')).sort(),
      'sql/<folder>/<name>.sql',
    );
    assert.deepEqual(
      readdirSync(directory).sort(),
      [...Object.keys(STATEMENT_FOLDERS), 'fragments'].sort(),
      'sql/ holds the statement folders and fragments/ only',
    );
  });

  for (const file of files) {
    it(`${file} opens with a header naming itself, its index, params and returns`, () => {
      const text = readFileSync(new URL(file, directory), 'utf8');
      const header = text
        .split('\n')
        .filter((line) => line.startsWith('--'))
        .join('\n');
      assert.match(header, new RegExp(`^-- ${nameOf(file)}: \\S`), 'first line is "-- <name>: what it does"');
      for (const field of ['index:', 'params:', 'returns:'])
        assert.ok(header.includes(`-- ${field}`), `header has "${field}"`);
      const body = text
        .split('\n')
        .filter((line) => !line.trimStart().startsWith('--'))
        .join('\n');
      assert.ok(!/;\s*\S/.test(body.replace(/;\s*$/, '')), 'one statement per file');
    });
  }

  it('fragments (sql/fragments/) name themselves, are used, and are spliced in whole', () => {
    const fragments = readdirSync(new URL('fragments/', directory)).filter((file) => file.endsWith('.sql'));
    const sources = files.map((file) => readFileSync(new URL(file, directory), 'utf8'));
    const loaded = loadStatements('relaybus');
    for (const file of fragments) {
      const name = file.replace(/\.sql$/, '');
      const text = readFileSync(new URL(`fragments/${file}`, directory), 'utf8');
      assert.match(
        text,
        new RegExp(`^-- fragment ${name}: \\S`),
        `${file}: first line is "-- fragment <name>: what it holds"`,
      );
      assert.ok(
        sources.some((source) => source.includes(`/*include ${name}*/`)),
        `${file} is included by a statement`,
      );
    }
    for (const name of STATEMENT_NAMES)
      assert.ok(!loaded[name].text.includes('/*include'), `${name}: every include resolved`);
  });

  it('qualifies every table with the configured schema and names statements per schema', () => {
    const a = loadStatements('relaybus');
    const b = loadStatements('other_schema');
    for (const name of STATEMENT_NAMES) {
      assert.ok(!a[name].text.includes('/*schema*/'), `${name}: marker replaced`);
      assert.ok(
        !/\b(?:FROM|JOIN|UPDATE|INTO)\s+relaybus_/i.test(a[name].text),
        `${name}: no unqualified relaybus table`,
      );
      assert.notEqual(a[name].name, b[name].name);
      assert.match(a[name].name, /^relaybus_[a-z_]+_[0-9a-f]{8}$/);
    }
    assert.ok(b.publish.text.includes('"other_schema".relaybus_events'));
  });

  it('the schema script (relaybus sql) names the file of each statement of sql/ it runs', () => {
    const named = [...createPostgresSchemaSql().matchAll(/^ {2}-- (sql\/\S+\.sql)$/gm)].map((m) => m[1]!);
    assert.ok(named.length > 0, 'the upgrade steps are named');
    for (const path of named) assert.ok(existsSync(new URL(`../../${path}`, import.meta.url)), `${path} exists`);
  });
});
