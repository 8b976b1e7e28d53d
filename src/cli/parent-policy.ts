import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

/**
 * Whether a long-running command (`relaybus worker`, `relaybus inbox`) stops when its parent process
 * exits. Only when npm started it as its command (`npx relaybus worker`, `npm exec`, an npm script
 * that is the command itself), or when asked (`--exit-with-parent`, `RELAYBUS_EXIT_WITH_PARENT=1`):
 * npm exits at once when a container runtime signals it and the orphan would never hear the signal.
 * A process started detached on purpose (setsid, `nohup ... &`, a launcher script that exits) keeps
 * running: nobody asked it to stop.
 */

/** The environment variable that forces the choice: 1 (watch the parent) or 0 (never). */
export const EXIT_WITH_PARENT_ENV = 'RELAYBUS_EXIT_WITH_PARENT';

/** What the policy reads of other processes; `undefined` where it cannot tell (no /proc, process gone). */
export interface ProcessReader {
  /** The command line, one entry per argument (a process that set its title has it in the first). */
  commandLine(pid: number): readonly string[] | undefined;
  /** The parent process id. */
  parentOf(pid: number): number | undefined;
  /** The session id (setsid starts a new one). */
  sessionOf(pid: number): number | undefined;
}

/** The answer, with the reason the worker logs. */
export interface ParentWatchDecision {
  readonly watch: boolean;
  readonly why: string;
}

/** Settings of `decideParentWatch`. */
export interface ParentWatchInput {
  readonly env: Readonly<Record<string, string | undefined>>;
  /** `--exit-with-parent` was given. */
  readonly flag?: boolean;
  /** This process's id and its parent's, read at start-up. */
  readonly pid?: number;
  readonly ppid?: number;
  readonly reader?: ProcessReader;
}

/** `/proc/<pid>/stat` fields after the command name: state, ppid, pgrp, session, ... */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** Reads Linux's /proc; answers `undefined` everywhere else. */
export const procReader: ProcessReader = {
  commandLine(pid) {
    try {
      const raw = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      const args = raw.split('\0');
      while (args.length > 0 && args.at(-1) === '') args.pop();
      return args;
    } catch {
      return undefined;
    }
  },
  parentOf(pid) {
    const value = Number(statFields(pid)?.[1]);
    return Number.isInteger(value) && value > 0 ? value : undefined;
  },
  sessionOf(pid) {
    const value = Number(statFields(pid)?.[3]);
    return Number.isInteger(value) && value >= 0 ? value : undefined;
  },
};

/** npm or npx itself: by the title npm gives itself (`npm exec ...`), or its entry script. */
export function isNpmCommandLine(args: readonly string[]): boolean {
  const [first = '', second = ''] = args;
  if (/^(npm|npx)( |$)/.test(first)) return true;
  const names = [basename(first), basename(second)];
  return names.some((name) => /^(npm|npx)(-cli\.js)?$/.test(name));
}

/** A script that puts its command in the background or detaches it (`&`, nohup, setsid, disown). */
export function detachesItsCommand(script: string): boolean {
  const unquoted = script.replace(/'[^']*'|"(?:[^"\\]|\\.)*"/g, "''").replace(/\d*[<>]&\d*-?|&>>?/g, ' '); // redirections (2>&1, &>file) are not backgrounds
  return /(^|[^&])&(?!&)/.test(unquoted) || /(^|[\s;|&(])(nohup|setsid|disown|daemonize)(\s|$)/.test(unquoted);
}

const SHELLS = /^(sh|bash|dash|ash|zsh|ksh|mksh|busybox)$/;

function truthy(value: string): boolean | undefined {
  if (/^(1|true|yes|on)$/i.test(value)) return true;
  if (/^(0|false|no|off)$/i.test(value)) return false;
  return undefined;
}

/**
 * Decide whether to stop when the parent process exits.
 *
 * ```ts
 * const { watch, why } = decideParentWatch({ env: process.env, flag: values['exit-with-parent'] });
 * ```
 */
export function decideParentWatch(input: ParentWatchInput): ParentWatchDecision {
  const { env } = input;
  if (input.flag === true) return { watch: true, why: '--exit-with-parent' };
  const forced = env[EXIT_WITH_PARENT_ENV];
  if (forced !== undefined && forced !== '') {
    const value = truthy(forced);
    if (value !== undefined) return { watch: value, why: `${EXIT_WITH_PARENT_ENV}=${forced}` };
  }
  const reader = input.reader ?? procReader;
  const pid = input.pid ?? process.pid;
  const ppid = input.ppid ?? process.ppid;
  const parent = reader.commandLine(ppid);
  const script = env.npm_lifecycle_script;
  if (parent === undefined && reader.commandLine(pid) !== undefined)
    return { watch: false, why: `its parent (pid ${ppid}) is gone already` };
  if (parent === undefined) {
    // No /proc (macOS): trust npm's environment, unless its script detaches the command.
    if (script !== undefined && !detachesItsCommand(script))
      return { watch: true, why: `started by npm (npm_lifecycle_script "${script}")` };
    return { watch: false, why: 'not started by npm' };
  }
  const session = reader.sessionOf(pid);
  if (session !== undefined && session !== reader.sessionOf(ppid))
    return { watch: false, why: 'it runs in a session of its own (setsid)' };
  if (isNpmCommandLine(parent)) return { watch: true, why: `its parent is npm (pid ${ppid})` };
  // npm runs its command through `sh -c <script>`: watch when that shell is npm's and the script runs the command in the foreground.
  const [shell = '', flag, command] = parent;
  // (npm exec appends the arguments to the script npm_lifecycle_script names: `'relaybus' worker`.)
  const runsScript =
    command !== undefined && script !== undefined && (command === script || command.startsWith(`${script} `));
  if (!runsScript || !SHELLS.test(basename(shell)) || flag !== '-c')
    return { watch: false, why: 'its parent is not npm' };
  if (detachesItsCommand(command)) return { watch: false, why: `the npm script "${command}" detaches it` };
  const grandparent = reader.parentOf(ppid);
  const npm = grandparent === undefined ? undefined : reader.commandLine(grandparent);
  if (npm === undefined || !isNpmCommandLine(npm)) return { watch: false, why: "its parent's parent is not npm" };
  return { watch: true, why: `npm (pid ${grandparent}) runs it through ${basename(shell)} (pid ${ppid})` };
}
