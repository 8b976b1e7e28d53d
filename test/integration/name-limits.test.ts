/**
 * One limit, counted one way: event types, ids and ordering keys of 1 to 200 characters, counted in code points by
 * both publish paths. `relaybus_publish` in SQL counts with Postgres's length(); `bus.publish` (and `defineEvent` for a
 * type) with src/core/limits.ts. The same boundary names go through both on real Postgres and must be accepted or
 * refused alike: 200 emoji (400 UTF-16 units) accepted, 201 refused, 199 ASCII and an emoji accepted, and so on. A
 * refusal's message must be valid UTF-16 (no emoji cut in half), and a name with a lone surrogate, which no driver can
 * send to Postgres as it is, is refused by TypeScript rather than stored as U+FFFD.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { InvalidInputError } from '../../src/core/errors.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';

const found = await findPostgres();

const EMOJI = '\u{1f389}';
const FAMILY = '\u{1f469}\u200d\u{1f469}\u200d\u{1f467}\u200d\u{1f466}'; // 7 code points, 11 UTF-16 units

/** Boundary names and whether a name of that shape is within the limit (1 to 200 code points). */
const BOUNDARIES: readonly (readonly [label: string, value: string, accepted: boolean])[] = [
  ['200 ASCII', 'a'.repeat(200), true],
  ['201 ASCII', 'a'.repeat(201), false],
  ['150 emoji (300 UTF-16 units)', EMOJI.repeat(150), true],
  ['200 emoji (400 UTF-16 units)', EMOJI.repeat(200), true],
  ['201 emoji', EMOJI.repeat(201), false],
  ['199 ASCII + 1 emoji (201 UTF-16 units)', `${'a'.repeat(199)}${EMOJI}`, true],
  ['200 ASCII + 1 emoji', `${'a'.repeat(200)}${EMOJI}`, false],
  ['1 emoji + 199 ASCII', `${EMOJI}${'a'.repeat(199)}`, true],
  ['100 e + combining acute (200 code points)', 'e\u0301'.repeat(100), true],
  ['100 e + combining acute + 1', `${'e\u0301'.repeat(100)}x`, false],
  ['28 ZWJ families (196 code points, 308 units)', FAMILY.repeat(28), true],
  ['29 ZWJ families (203 code points)', FAMILY.repeat(29), false],
  ['one emoji', EMOJI, true],
];

/** A string with no lone surrogate (a message cut inside a surrogate pair has one). */
function assertWellFormed(text: string, what: string): void {
  assert.ok(!/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text), `${what}: ${text}`);
}

describe('name limits: relaybus_publish and bus.publish accept and refuse the same names (real Postgres)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('name_limits', 4, (opened) => ({ pool, store } = opened));
  let serial = 0;

  /** The event `id` as stored holds `value` whole in `field`; then it goes, so the other path can publish the same id. */
  async function readBackAndRemove(id: string, field: 'type' | 'key' | 'id', value: string): Promise<void> {
    const { rows } = await pool.query<{ type: string; key: string | null; id: string }>(
      `SELECT type, key, id FROM "${schema}".relaybus_events WHERE id = $1`,
      [id],
    );
    assert.equal(rows.length, 1, `event ${id} stored`);
    assert.equal(rows[0]![field], value, `the ${field} stored whole`);
    await pool.query(`DELETE FROM "${schema}".relaybus_deliveries WHERE event_id = $1`, [id]);
    await pool.query(`DELETE FROM "${schema}".relaybus_events WHERE id = $1`, [id]);
  }

  /** relaybus_publish of one event of `type` (subscribed to by handler h, written straight into the table). */
  async function viaSql(field: 'type' | 'key' | 'id', value: string): Promise<'accepted' | 'refused'> {
    serial += 1;
    const type = field === 'type' ? value : 'limits.sql';
    await pool.query(
      `INSERT INTO "${schema}".relaybus_subscriptions (event_type, handler, max_attempts) VALUES ($1, 'h', 3) ON CONFLICT DO NOTHING`,
      [type],
    );
    const id = field === 'id' ? value : `sql-${serial}`;
    try {
      await pool.query(`SELECT "${schema}".relaybus_publish(type => $1, payload => '{}', key => $2, id => $3)`, [
        type,
        field === 'key' ? value : null,
        id,
      ]);
    } catch (error) {
      assert.ok(error instanceof pg.DatabaseError, String(error));
      assert.equal(error.code, '22023', error.message);
      assert.match(error.message, /type, key and id must be 1 to 200 characters/);
      return 'refused';
    }
    await readBackAndRemove(id, field, value);
    return 'accepted';
  }

  /** bus.publish of one event (defineEvent for a type), with a handler registered for it. */
  async function viaBus(field: 'type' | 'key' | 'id', value: string): Promise<'accepted' | 'refused'> {
    serial += 1;
    const id = field === 'id' ? value : `ts-${serial}`;
    try {
      const event = defineEvent(field === 'type' ? value : 'limits.ts', Type.Object({}));
      const bus = createRelayBus({ store, events: [event] });
      bus.on(event, 'h', () => {});
      await store.transaction((tx) => bus.publish(tx, event, {}, { ...(field === 'key' ? { key: value } : {}), id }));
    } catch (error) {
      assert.ok(error instanceof Error, String(error));
      assert.match(error.message, /must be a non-empty string of at most 200 characters/);
      assertWellFormed(error.message, 'the refusal');
      return 'refused';
    }
    await readBackAndRemove(id, field, value);
    return 'accepted';
  }

  for (const field of ['key', 'id', 'type'] as const) {
    it(`${field}: the same boundary names accepted and refused by both paths`, async () => {
      for (const [label, value, accepted] of BOUNDARIES) {
        const expected = accepted ? 'accepted' : 'refused';
        assert.equal(await viaSql(field, value), expected, `relaybus_publish, ${field} of ${label}`);
        assert.equal(await viaBus(field, value), expected, `bus.publish, ${field} of ${label}`);
      }
    });
  }

  it('a refusal never cuts an emoji in half, and states the length in characters (code points)', () => {
    for (const name of [
      EMOJI.repeat(201),
      `${'a'.repeat(59)}${EMOJI.repeat(300)}`,
      `${'a'.repeat(180)}${EMOJI.repeat(30)}`,
    ]) {
      let message = '';
      try {
        defineEvent(name, Type.Object({}));
      } catch (error) {
        message = (error as Error).message;
      }
      assert.match(message, /at most 200 characters/);
      assertWellFormed(message, 'defineEvent refusal');
    }
    let message = '';
    try {
      defineEvent(EMOJI.repeat(201), Type.Object({}));
    } catch (error) {
      message = (error as Error).message;
    }
    assert.match(message, /a string of 201 characters/);
  });

  it('a name with a lone surrogate is refused by TypeScript (Postgres would store U+FFFD: two ids would collide)', async () => {
    const Lone = defineEvent('limits.lone', Type.Object({}));
    const bus = createRelayBus({ store, events: [Lone] });
    bus.on(Lone, 'h', () => {});
    for (const name of ['a\ud800', '\udc00b', `${EMOJI}\ud83c`]) {
      for (const options of [{ id: name }, { key: name }]) {
        await assert.rejects(
          store.transaction((tx) => bus.publish(tx, Lone, {}, options)),
          (error: unknown) => {
            assert.ok(error instanceof InvalidInputError, String(error));
            assert.match(error.message, /lone surrogate/);
            assertWellFormed(error.message, 'the refusal');
            return true;
          },
        );
      }
    }
  });
});
