import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseArrayLiteral, toArrayLiteral } from '../../src/postgres/drivers/array-literal.js';
import { jsonCastParams, placeholderChunks, splitStatements } from '../../src/postgres/drivers/placeholders.js';
import { loadStatements, STATEMENT_NAMES } from '../../src/postgres/statements.js';

describe('placeholders', () => {
  it('finds $N outside comments, strings, quoted identifiers and dollar quotes', () => {
    const text = `-- params: $1 owner, $2 lanes
SELECT $1::text, '$3', E'\\'$4', "a$5", $tag$ $6 $tag$, /* $7 /* nested $8 */ $9 */ x$10, coalesce($2::int[], '{}') -- $11`;
    assert.deepEqual(
      placeholderChunks(text).filter((c) => typeof c === 'number'),
      [1, 2],
    );
    assert.equal(
      placeholderChunks(text)
        .map((c) => (typeof c === 'number' ? `$${c}` : c))
        .join(''),
      text,
    );
  });

  it('numbers every occurrence in order, repeats included', () => {
    assert.deepEqual(placeholderChunks('select $2, $1, $2'), ['select ', 2, ', ', 1, ', ', 2]);
  });

  it('knows which parameters are cast to json or jsonb', () => {
    assert.deepEqual([...jsonCastParams("select $1::jsonb, $2 :: JSON, $3::text, $4::jsonb[], '$5::jsonb'")], [1, 2]);
  });

  it('splits scripts at top-level semicolons only', () => {
    const script = `-- header; with a semicolon
CREATE TABLE a (x text DEFAULT ';');
DO $$ BEGIN PERFORM 1; END $$;
/* comment; */
INSERT INTO a VALUES ('a;b')`;
    assert.deepEqual(splitStatements(script), [
      "-- header; with a semicolon\nCREATE TABLE a (x text DEFAULT ';')",
      'DO $$ BEGIN PERFORM 1; END $$',
      "/* comment; */\nINSERT INTO a VALUES ('a;b')",
    ]);
  });

  it('every statement of sql/ uses its parameters $1..$N without gaps, none of them inside a comment', () => {
    const statements = loadStatements('relaybus');
    for (const name of STATEMENT_NAMES) {
      // As the store sends it: fragments spliced in (sql/fragments/), which hold some of the parameters.
      const { text } = statements[name];
      const file = `${name}.sql`;
      const used = new Set(placeholderChunks(text).filter((c): c is number => typeof c === 'number'));
      const max = Math.max(0, ...used);
      assert.deepEqual(
        [...used].sort((a, b) => a - b),
        Array.from({ length: max }, (_, i) => i + 1),
        file,
      );
      assert.equal(splitStatements(text).length, 1, `${file} is one statement`);
    }
  });
});

describe('array literals', () => {
  it('round-trips text arrays with quotes, backslashes, commas and NULL', () => {
    const values = ['a', 'b"c', 'd\\e', 'f,g', '', 'NULL', null, '{x}'];
    const literal = toArrayLiteral(values);
    assert.equal(literal, '{"a","b\\"c","d\\\\e","f,g","","NULL",NULL,"{x}"}');
    assert.deepEqual(
      parseArrayLiteral(literal),
      values.map((v) => v),
    );
  });

  it('writes numbers, bigints and nested arrays bare', () => {
    assert.equal(toArrayLiteral([1, 2n, [3, null]]), '{1,2,{3,NULL}}');
  });

  it('writes an array of numbers and digit strings bare, and quotes every string once one needs it', () => {
    assert.equal(toArrayLiteral(['12', 7, '0345', -1.5]), '{12,7,0345,-1.5}');
    assert.deepEqual(parseArrayLiteral(toArrayLiteral(['12', '0345'])), ['12', '0345']);
    assert.equal(toArrayLiteral(['12', '1e3', 4]), '{"12","1e3",4}');
    assert.equal(toArrayLiteral(['12', '']), '{"12",""}');
    assert.equal(toArrayLiteral([1, Number.NaN]), '{1,NaN}');
    assert.equal(toArrayLiteral([]), '{}');
  });

  it('parses unquoted elements and the empty array, and refuses several dimensions', () => {
    assert.deepEqual(parseArrayLiteral('{h1,h2,NULL}'), ['h1', 'h2', null]);
    assert.deepEqual(parseArrayLiteral('{}'), []);
    assert.equal(parseArrayLiteral('{{1,2},{3,4}}'), undefined);
    assert.equal(parseArrayLiteral('[1:2]={1,2}'), undefined);
  });
});
