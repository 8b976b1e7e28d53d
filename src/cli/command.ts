/**
 * What every CLI command shares: the context it runs in (streams, environment, working directory),
 * the exit codes, and the two error kinds `main.ts` turns into one `relaybus: <message>` line.
 */

/** Exit codes of every command; `relaybus --help` documents them. */
export const ExitCode = Object.freeze({
  /** The command did what it was asked (a worker stopped gracefully). */
  ok: 0,
  /** Something failed at run time: the database, the config module, a handler run that could not be recorded. */
  failure: 1,
  /** The command line is wrong: unknown command or flag, bad value, missing config file. */
  usage: 2,
  /** A worker stopped gracefully because its parent process exited (npx signalled), not because it was asked to. */
  parentExited: 129,
  /** A worker was forced to stop by a second SIGINT. */
  forcedByInterrupt: 130,
  /** A worker was forced to stop by a second SIGTERM. */
  forcedByTerminate: 143,
});

/** A writable stream as the CLI uses it: `isTTY` and `columns` decide between a live view and plain lines. */
export interface OutputStream {
  write(chunk: string): boolean;
  readonly isTTY?: boolean;
  readonly columns?: number;
}

/** Where a command runs: injected so tests and the demo can capture output. */
export interface CliContext {
  readonly stdout: OutputStream;
  readonly stderr: OutputStream;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly cwd: string;
  /** Print stack traces and the library's log lines. */
  readonly verbose: boolean;
}

/** One subcommand (`worker`, `stats`, `dead list`, ...). */
export interface Command {
  /** As typed after `relaybus`, e.g. `dead list`. */
  readonly name: string;
  /** One line for `relaybus --help`. */
  readonly summary: string;
  /** The full `--help` text. */
  readonly help: string;
  /** Run with the arguments after the command name; resolves with the exit code. */
  run(args: readonly string[], context: CliContext): Promise<number>;
}

/** The command line is wrong (exit 2). The message says what to type instead. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** A failure whose message is already written for the user (exit 1). */
export class CliFailure extends Error {
  override readonly name = 'CliFailure';
}

/** Write a line to a stream. */
export function writeLine(stream: OutputStream, line = ''): void {
  stream.write(line + '\n');
}
