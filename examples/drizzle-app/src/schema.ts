import { integer, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/** The app's own tables. */
export const orders = pgTable('orders', {
  id: text('id').primaryKey(),
  customerId: text('customer_id').notNull(),
  totalCents: integer('total_cents').notNull(),
});

/** Written by a transactional handler: one row per order, committed together with the delivery's completion. */
export const receipts = pgTable('receipts', {
  orderId: text('order_id').primaryKey(),
  sentAt: timestamp('sent_at', { withTimezone: true }).notNull().defaultNow(),
});
