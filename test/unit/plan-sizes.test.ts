/**
 * When a claim session drops its connection's cached plans (src/postgres/plan-sizes.ts): once a heap has grown past
 * twice the pages the plans were made at, and only then; new statistics count as plans made again at their size.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PlanSizes } from '../../src/postgres/plan-sizes.js';

const table = (pages: number, analyzedPages = 1, analyzedRows = 30, name: 'deliveries' | 'events' = 'deliveries') => ({
  name,
  pages,
  analyzed_pages: analyzedPages,
  analyzed_rows: analyzedRows,
});

describe('the sizes a connection planned its claims at', () => {
  it('are outgrown once a heap passes twice the pages seen at the first look, and then start from the new size', () => {
    const sizes = new PlanSizes();
    assert.equal(sizes.outgrown([table(2), table(500, 400, 9_000, 'events')]), false, 'the first look sets them');
    assert.equal(sizes.outgrown([table(8), table(500, 400, 9_000, 'events')]), false, '8 pages: within 2 x (2 + 2)');
    assert.equal(sizes.outgrown([table(9), table(500, 400, 9_000, 'events')]), true);
    assert.equal(sizes.outgrown([table(9), table(500, 400, 9_000, 'events')]), false, 'dropped at 9 pages');
    assert.equal(sizes.outgrown([table(22), table(500, 400, 9_000, 'events')]), false);
    assert.equal(sizes.outgrown([table(23), table(500, 400, 9_000, 'events')]), true);
  });

  it('any table outgrowing them counts', () => {
    const sizes = new PlanSizes();
    sizes.outgrown([table(2), table(500, 400, 9_000, 'events')]);
    assert.equal(sizes.outgrown([table(2), table(1_005, 400, 9_000, 'events')]), true);
  });

  it('new statistics count as plans made again at the pages they saw', () => {
    const sizes = new PlanSizes();
    sizes.outgrown([table(2)]);
    // Analyzed at 40 pages (every session plans again): 84 pages is within 2 x (40 + 2), 85 is not.
    assert.equal(sizes.outgrown([table(60, 40, 1_500)]), false);
    assert.equal(sizes.outgrown([table(84, 40, 1_500)]), false);
    assert.equal(sizes.outgrown([table(85, 40, 1_500)]), true);
  });
});
