import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { InvalidOptionsError, InvalidPayloadError } from '../../src/core/errors.js';
import { defineEvent, isEventDefinition, type EventPayload } from '../../src/core/events.js';

const OrderPlaced = defineEvent(
  'order.placed',
  Type.Object(
    {
      orderId: Type.String({ minLength: 1 }),
      totalCents: Type.Integer({ minimum: 0 }),
      lines: Type.Array(Type.Object({ sku: Type.String(), qty: Type.Integer({ minimum: 1 }) })),
      note: Type.Optional(Type.String()),
    },
    { additionalProperties: false },
  ),
);

const valid = { orderId: 'o-1', totalCents: 1200, lines: [{ sku: 'a', qty: 2 }] };

function thrown(fn: () => unknown): InvalidPayloadError {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof InvalidPayloadError, `expected InvalidPayloadError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected a throw');
}

describe('defineEvent', () => {
  it('keeps the type name and schema and brands the definition', () => {
    assert.equal(OrderPlaced.type, 'order.placed');
    assert.equal(OrderPlaced.schema.type, 'object');
    assert.ok(isEventDefinition(OrderPlaced));
    assert.ok(!isEventDefinition({ type: 'order.placed', schema: {} }));
    assert.ok(Object.isFrozen(OrderPlaced));
  });

  it('types the payload from the schema', () => {
    const payload: EventPayload<typeof OrderPlaced> = OrderPlaced.validate(valid);
    payload.orderId satisfies string;
    payload.note satisfies string | undefined;
    // @ts-expect-error not in the schema
    void payload.customer;
    assert.deepEqual(payload, valid);
  });

  it('accepts a valid payload and returns it', () => {
    assert.deepEqual(OrderPlaced.check(valid), []);
    assert.equal(OrderPlaced.validate(valid), valid);
  });

  it('names the path and the rule of every broken rule', () => {
    const error = thrown(() =>
      OrderPlaced.validate({ orderId: '', totalCents: -1, lines: [{ sku: 'a', qty: 0 }], extra: true }),
    );
    assert.equal(error.code, 'RELAYBUS_INVALID_PAYLOAD');
    const byPath = new Map(error.issues.map((issue) => [issue.path, issue.message]));
    assert.match(byPath.get('/orderId') ?? '', /length greater or equal to 1/);
    assert.match(byPath.get('/totalCents') ?? '', /greater or equal to 0/);
    assert.match(byPath.get('/lines/0/qty') ?? '', /greater or equal to 1/);
    assert.match(byPath.get('/extra') ?? '', /Unexpected property/);
    assert.match(error.message, /Invalid payload for event "order.placed": .*\/orderId: Expected string length/);
    assert.match(error.message, /Nothing was written/);
  });

  it('reports a wrong root as path "/"', () => {
    const error = thrown(() => OrderPlaced.validate('not an object'));
    assert.equal(error.issues[0]?.path, '/');
  });

  it('rejects values that do not survive JSON, with their path', () => {
    const Anything = defineEvent('anything', Type.Unknown());
    const cases: [unknown, string, RegExp][] = [
      [{ at: new Date(0) }, '/at', /Date is not a plain JSON value.*ISO string/],
      [{ n: 10n }, '/n', /bigint/],
      [{ list: [1, undefined] }, '/list/1', /undefined/],
      [{ x: Number.NaN }, '/x', /NaN/],
      [{ f: () => 1 }, '/f', /function/],
      [{ m: new Map() }, '/m', /Map is not a plain JSON value/],
      [undefined, '/', /undefined/],
      [{ 'a/b': { c: Infinity } }, '/a~1b/c', /Infinity/],
    ];
    for (const [payload, path, message] of cases) {
      const error = thrown(() => Anything.validate(payload));
      assert.equal(error.issues[0]?.path, path, `path for ${String(message)}`);
      assert.match(error.issues[0]?.message ?? '', message);
    }
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    assert.match(thrown(() => Anything.validate(cyclic)).issues[0]?.message ?? '', /circular/);
    // undefined properties are dropped by JSON, like an absent optional property
    assert.deepEqual(Anything.check({ a: undefined, b: null, c: [1, 'x', true, { d: {} }] }), []);
    assert.deepEqual(Anything.check(Object.create(null) as object), []);
  });

  it('hints at FormatRegistry for an unregistered format', () => {
    const WithFormat = defineEvent(
      'with.format',
      Type.Object({ id: Type.String({ format: 'relaybus-test-unregistered' }) }),
    );
    const error = thrown(() => WithFormat.validate({ id: 'x' }));
    assert.match(error.message, /Unknown format/);
    assert.match(error.message, /FormatRegistry\.Set/);
  });

  it('caps the issues listed in the message', () => {
    const Many = defineEvent(
      'many',
      Type.Object({
        a: Type.String(),
        b: Type.String(),
        c: Type.String(),
        d: Type.String(),
        e: Type.String(),
        f: Type.String(),
        g: Type.String(),
      }),
    );
    const error = thrown(() => Many.validate({}));
    assert.ok(error.issues.length >= 7);
    assert.match(error.message, /and \d+ more/);
  });

  it('rejects a bad type name or schema with InvalidOptionsError', () => {
    assert.throws(() => defineEvent('', Type.String()), InvalidOptionsError);
    assert.throws(() => defineEvent('x'.repeat(201), Type.String()), InvalidOptionsError);
    assert.throws(() => defineEvent('ok', null as unknown as ReturnType<typeof Type.String>), InvalidOptionsError);
  });
});
