/**
 * Postgres array literals (`{"a","b",NULL}`), for drivers whose own array handling depends on
 * settings relaybus does not control: postgres.js serialises a JS array only when it fetched the
 * array types at connect (`fetch_types`, on by default), and hands array columns back as text when
 * it did not. Sending the literal and parsing text results keeps both cases right. The pg driver
 * sends them too: pg's own array serialiser escapes every element with two replaces, and a claim
 * sends hundreds of elements.
 */

function element(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) return toArrayLiteral(value);
  let text: string;
  if (typeof value === 'string') text = value;
  else if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  else if (typeof value === 'boolean') return value ? 't' : 'f';
  else if (value instanceof Date) text = value.toISOString();
  else text = JSON.stringify(value);
  // Most texts need no escape (ids, keys, handler names): quoted as they are, without a replace per element.
  return text.includes('"') || text.includes('\\') ? `"${text.replace(/[\\"]/g, (c) => `\\${c}`)}"` : `"${text}"`;
}

/** A string of decimal digits: an id or an epoch, the same in an array literal bare or quoted, whatever its type. */
const DIGITS = /^\d+$/;

/** Every element is a number or a string of digits: written bare, as `join` writes them. */
function allBare(values: readonly unknown[]): boolean {
  for (let index = 0; index < values.length; index += 1) {
    const value = values[index];
    if (typeof value === 'number' ? !Number.isFinite(value) : typeof value !== 'string' || !DIGITS.test(value))
      return false;
  }
  return true;
}

/**
 * A JS array (possibly nested) as a Postgres array literal.
 *
 * ```ts
 * toArrayLiteral(['a', 'b"c', null]); // '{"a","b\\"c",NULL}'
 * ```
 */
export function toArrayLiteral(values: readonly unknown[]): string {
  // A completion's ids, lanes, epochs and claims: joined into one string at once. Built up element by element, quoted,
  // they were a visible share of the garbage a dispatcher makes per delivery.
  if (allBare(values)) return `{${values.join(',')}}`;
  let literal = '{';
  for (let index = 0; index < values.length; index += 1) {
    if (index > 0) literal += ',';
    literal += element(values[index]);
  }
  return `${literal}}`;
}

/**
 * A one-dimensional array literal as strings (elements stay text; NULL becomes null). Returns
 * undefined for a literal it does not handle (several dimensions, bounds decoration).
 */
export function parseArrayLiteral(literal: string): (string | null)[] | undefined {
  if (!literal.startsWith('{') || !literal.endsWith('}')) return undefined;
  const out: (string | null)[] = [];
  const body = literal.slice(1, -1);
  if (body.length === 0) return out;
  let i = 0;
  while (i <= body.length) {
    if (body[i] === '{') return undefined;
    let value: string | null;
    if (body[i] === '"') {
      let text = '';
      i += 1;
      while (i < body.length && body[i] !== '"') {
        if (body[i] === '\\') i += 1;
        text += body[i] ?? '';
        i += 1;
      }
      i += 1; // closing quote
      value = text;
    } else {
      const comma = body.indexOf(',', i);
      const raw = body.slice(i, comma === -1 ? body.length : comma);
      i = comma === -1 ? body.length : comma;
      value = raw === 'NULL' ? null : raw;
    }
    out.push(value);
    if (i >= body.length) break;
    if (body[i] !== ',') return undefined;
    i += 1;
  }
  return out;
}
