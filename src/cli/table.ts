/**
 * Aligned plain-text tables for the admin commands: upper-case headers, numbers right-aligned,
 * text left-aligned, two spaces between columns, one optional column shortened to fit a width.
 */

import { writeLine, type OutputStream } from './command.js';

/** One column of a table. */
export interface Column<Row> {
  readonly header: string;
  readonly align?: 'left' | 'right';
  /** The cell text of `row` (newlines are flattened). */
  readonly value: (row: Row) => string;
  /** Shorten this column (with an ellipsis) so the table fits the width given to `renderTable`. */
  readonly shrink?: boolean;
}

/** Collapse whitespace (newlines included) to single spaces. */
export function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** `text` cut to `width` characters, ending in an ellipsis when cut. */
export function truncate(text: string, width: number): string {
  if (text.length <= width) return text;
  return width <= 1 ? text.slice(0, Math.max(0, width)) : `${text.slice(0, width - 1)}…`;
}

/**
 * Render `rows` under `columns` as lines. With `maxWidth`, the `shrink` column is cut so each line
 * fits (it keeps at least 12 characters).
 *
 * ```ts
 * renderTable([{ header: 'handler', value: (r) => r.name }, { header: 'due', align: 'right', value: (r) => String(r.due) }], rows);
 * ```
 */
export function renderTable<Row>(columns: readonly Column<Row>[], rows: readonly Row[], maxWidth?: number): string[] {
  const cells = rows.map((row) => columns.map((column) => oneLine(column.value(row))));
  const widths = columns.map((column, i) => Math.max(column.header.length, ...cells.map((line) => line[i]!.length)));
  if (maxWidth !== undefined) {
    const shrinkAt = columns.findIndex((column) => column.shrink);
    const total = widths.reduce((sum, width) => sum + width, 0) + 2 * (columns.length - 1);
    if (shrinkAt >= 0 && total > maxWidth) widths[shrinkAt] = Math.max(12, widths[shrinkAt]! - (total - maxWidth));
  }
  const render = (texts: readonly string[]) =>
    texts
      .map((text, i) => {
        const cell = truncate(text, widths[i]!);
        return columns[i]!.align === 'right' ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!);
      })
      .join('  ')
      .trimEnd();
  return [render(columns.map((column) => column.header.toUpperCase())), ...cells.map(render)];
}

/**
 * Write `rows` as a table to `stream`: as wide as the terminal when it is one (40 columns at least), else 160
 * characters, so a piped listing keeps its long errors readable.
 */
export function writeTable<Row>(stream: OutputStream, columns: readonly Column<Row>[], rows: readonly Row[]): void {
  const width = stream.isTTY && stream.columns !== undefined && stream.columns >= 40 ? stream.columns : 160;
  for (const line of renderTable(columns, rows, width)) writeLine(stream, line);
}
