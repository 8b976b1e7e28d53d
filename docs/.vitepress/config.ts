/**
 * The guide's site (VitePress): `npm run docs:build` writes it to docs/.vitepress/dist, `npm run docs:dev` serves it.
 * A dead link between pages fails the build; test/docs/site.test.ts also resolves every anchor and opens a page in
 * Chromium.
 */
import { defineConfig } from 'vitepress';

export default defineConfig({
  title: 'relaybus',
  description: 'Transactional outbox and in-database event bus for TypeScript, Postgres first.',
  lang: 'en',
  cleanUrls: false,
  lastUpdated: false,
  themeConfig: {
    nav: [
      { text: 'Guide', link: '/guide/getting-started' },
      { text: 'Reference', link: '/reference/configuration' },
      { text: 'Performance', link: '/guide/performance' },
    ],
    sidebar: [
      {
        text: 'Start',
        items: [
          { text: 'Getting started', link: '/guide/getting-started' },
          { text: 'How it works', link: '/guide/how-it-works' },
        ],
      },
      {
        text: 'Publishing',
        items: [
          { text: 'Publishing events', link: '/guide/publishing' },
          { text: 'Tables and migrations', link: '/guide/migrations' },
          { text: 'From SQL and triggers', link: '/guide/sql' },
        ],
      },
      {
        text: 'Delivering',
        items: [
          { text: 'Handlers, retries, dead letters', link: '/guide/handlers' },
          { text: 'Subscriptions', link: '/guide/subscriptions' },
          { text: 'Running workers', link: '/guide/workers' },
          { text: 'Operations', link: '/guide/operations' },
          { text: 'Replay', link: '/guide/replay' },
          { text: 'Past one database', link: '/guide/brokers' },
          { text: 'Upgrading', link: '/guide/upgrading' },
        ],
      },
      {
        text: 'Design',
        items: [
          { text: 'Guarantees and trade-offs', link: '/guide/guarantees' },
          { text: 'Performance', link: '/guide/performance' },
        ],
      },
      {
        text: 'Reference',
        items: [
          { text: 'Configuration', link: '/reference/configuration' },
          { text: 'Command line', link: '/reference/cli' },
          { text: 'Errors', link: '/reference/errors' },
          { text: 'Lifecycle events', link: '/reference/lifecycle-events' },
        ],
      },
      { text: 'Contributing', link: '/contributing' },
    ],
    search: { provider: 'local' },
    outline: { level: [2, 3] },
  },
});
