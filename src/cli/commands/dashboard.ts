import { withAdminStore } from '../admin-store.js';
import {
  DATABASE_FLAGS,
  durationFlag,
  HELP_FLAG,
  integerFlag,
  parseFlags,
  renderHelp,
  VERBOSE_FLAG,
  type FlagSpecs,
} from '../args.js';
import { CliFailure, ExitCode, UsageError, writeLine, type Command } from '../command.js';
import { startDashboard, type Dashboard } from '../dashboard/server.js';
import { isLoopbackHost, MIN_TOKEN_LENGTH, TOKEN_ENV, tokenProblem } from '../dashboard/security.js';
import { onShutdownSignals } from '../signals.js';

/**
 * `relaybus dashboard`: the admin page in a browser (see `cli/dashboard/`): per-handler statistics
 * with a backlog chart and a pause or resume action, dead letters with their payload and a requeue
 * action, the held lanes, an event search. It reads and writes only through the store API of `--database-url` / `--schema`.
 */

export const DEFAULT_DASHBOARD_PORT = 8473;
const DEFAULT_HOST = '127.0.0.1';

const FLAGS = {
  ...DATABASE_FLAGS,
  port: {
    type: 'string',
    value: 'port',
    description: `Port to listen on (0: any free port, printed). Default: ${DEFAULT_DASHBOARD_PORT}.`,
  },
  host: {
    type: 'string',
    value: 'host',
    description: `Address to bind. Default: ${DEFAULT_HOST} (this machine only). Any other address needs a token.`,
  },
  token: {
    type: 'string',
    value: 'secret',
    description: `Require this token (at least ${MIN_TOKEN_LENGTH} characters) to log in; default: the ${TOKEN_ENV} environment variable. Required when --host is not a loopback address.`,
  },
  'sample-interval': {
    type: 'string',
    value: 'time',
    description: 'How often the backlog chart is sampled, e.g. 2s. Default: 2s.',
  },
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

/** `relaybus dashboard`. */
export const dashboardCommand: Command = {
  name: 'dashboard',
  summary: 'Admin page in a browser: statistics, backlog chart, pause and resume, dead letters, requeue.',
  help: renderHelp({
    usage: ['relaybus dashboard [--port <port>] [--host <host>] [--token <secret>]'],
    description:
      "Serve the admin page: per-handler statistics (the numbers of relaybus stats) with a backlog-over-time chart and a pause or resume button per handler (since when and why a handler is paused), the dead letters with their last error, payload and headers and a requeue button, the held lanes (lease owner, lease, in flight), and a search by event id that shows the event's payload, headers and deliveries (completed ones too where a completion history is kept). Everything goes through the store API of --database-url / --schema. Ctrl-C stops it.",
    flags: FLAGS,
    sections: [
      {
        title: 'Security',
        lines: [
          `It binds ${DEFAULT_HOST} unless told otherwise. Any other --host needs a token (--token or`,
          `${TOKEN_ENV}); with one, the page asks for it and keeps a session cookie (HttpOnly,`,
          'SameSite=Strict), and scripts may send Authorization: Bearer <token>. Requeue and logout are',
          "POSTs from the page's own origin with the session's CSRF token; a bearer request needs no CSRF",
          'token (a browser never attaches that header by itself). Data is shown as text, never as HTML.',
        ],
      },
      {
        title: 'Exit codes',
        lines: [
          '0  stopped with Ctrl-C',
          '1  the database failed, or the port is in use',
          '2  usage error (a non-local --host without a token, a bad token)',
        ],
      },
      {
        title: 'Examples',
        lines: [
          'relaybus dashboard                                   # http://127.0.0.1:8473',
          `${TOKEN_ENV}=$(openssl rand -hex 24) relaybus dashboard --host 0.0.0.0 --port 8080`,
        ],
      },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('dashboard', args, FLAGS);
    const port = integerFlag('port', values.port, 0, 65_535) ?? DEFAULT_DASHBOARD_PORT;
    const host = values.host ?? DEFAULT_HOST;
    const sampleIntervalMs = durationFlag('sample-interval', values['sample-interval'], 100, 3_600_000) ?? 2_000;
    const fromEnv = context.env[TOKEN_ENV];
    const token = values.token ?? (fromEnv === undefined || fromEnv === '' ? undefined : fromEnv);
    if (token !== undefined) {
      const problem = tokenProblem(token);
      if (problem !== undefined)
        throw new UsageError(`${values.token !== undefined ? '--token' : TOKEN_ENV} is not a usable token: ${problem}`);
    }
    const loopback = isLoopbackHost(host);
    if (!loopback && token === undefined) {
      throw new UsageError(
        `--host ${host} lets other machines reach the dashboard, so it needs a token: --token <secret> or ${TOKEN_ENV} (at least ${MIN_TOKEN_LENGTH} characters, e.g. openssl rand -hex 24). Or keep ${DEFAULT_HOST} and tunnel (ssh -L).`,
      );
    }
    return withAdminStore(values, context, async ({ store, schema, target }) => {
      await store.statistics(); // fail now, with the admin commands' message, when the database or the tables are missing
      let dashboard: Dashboard;
      try {
        dashboard = await startDashboard({ store, schema, target, host, port, token, loopback, sampleIntervalMs });
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        if (code === 'EADDRINUSE')
          throw new CliFailure(
            `port ${port} on ${host} is in use (a worker's --metrics-port, another dashboard?); pick another --port`,
            { cause: error },
          );
        if (code === 'EADDRNOTAVAIL')
          throw new CliFailure(`${host} is not an address of this machine; check --host`, { cause: error });
        if (code === 'EACCES')
          throw new CliFailure(`port ${port} needs privileges here; pick a port above 1023`, { cause: error });
        throw error;
      }
      writeLine(
        context.stdout,
        `relaybus dashboard on ${dashboard.url} (schema "${schema}" on ${target}${token === undefined ? '' : '; token required'}); Ctrl-C stops`,
      );
      await new Promise<void>((resolve) => {
        const dispose = onShutdownSignals({
          graceful: () => {
            dispose();
            resolve();
          },
          force: () => resolve(),
        });
      });
      await dashboard.close();
      return ExitCode.ok;
    });
  },
};
