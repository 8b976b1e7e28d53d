/**
 * Which workers stop when their parent process exits (src/cli/parent-policy.ts): the ones npm started
 * as its command, and the ones asked to; never one started detached (setsid, nohup ... &, a launcher).
 * Process trees are given to the policy as a table; the built bin's behaviour is in worker-resilience.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  decideParentWatch,
  detachesItsCommand,
  isNpmCommandLine,
  procReader,
  type ProcessReader,
} from '../../src/cli/parent-policy.js';

interface Proc {
  readonly args: readonly string[];
  readonly ppid: number;
  readonly session: number;
}

/** A process table: pid -> command line, parent, session. */
function table(procs: Record<number, Proc>): ProcessReader {
  return {
    commandLine: (pid) => procs[pid]?.args,
    parentOf: (pid) => procs[pid]?.ppid,
    sessionOf: (pid) => procs[pid]?.session,
  };
}

const NPM_EXEC = { args: ['npm exec relaybus worker', '', ''], ppid: 1, session: 7 };
const WORKER = { args: ['node', '/app/node_modules/.bin/relaybus', 'worker'], ppid: 20, session: 7 };

describe('decideParentWatch', () => {
  it('watches when npm runs the worker through sh -c <its script> (npx relaybus worker, npm exec, npm run)', () => {
    // npm exec names the command in npm_lifecycle_script and gives the shell the command and its arguments.
    const reader = table({
      10: NPM_EXEC,
      20: { args: ['sh', '-c', "'relaybus' worker bus.mjs --concurrency 4"], ppid: 10, session: 7 },
      30: WORKER,
    });
    const decision = decideParentWatch({
      env: { npm_lifecycle_script: "'relaybus' worker", npm_command: 'exec' },
      pid: 30,
      ppid: 20,
      reader,
    });
    assert.equal(decision.watch, true, decision.why);
    assert.match(decision.why, /npm \(pid 10\) runs it through sh \(pid 20\)/);
  });

  it('watches when npm itself is the parent (a shell that execs its command)', () => {
    const reader = table({ 10: NPM_EXEC, 30: { ...WORKER, ppid: 10 } });
    assert.equal(decideParentWatch({ env: {}, pid: 30, ppid: 10, reader }).watch, true);
    const cli = table({
      10: { ...NPM_EXEC, args: ['/usr/bin/node', '/usr/lib/node_modules/npm/bin/npx-cli.js'] },
      30: WORKER,
    });
    assert.equal(decideParentWatch({ env: {}, pid: 30, ppid: 10, reader: cli }).watch, true);
  });

  it('does not watch a worker an npm script starts detached (nohup ... &, setsid, &)', () => {
    for (const script of [
      'nohup relaybus worker > worker.log 2>&1 &',
      'setsid relaybus worker',
      'relaybus worker & echo started',
    ]) {
      const reader = table({ 10: NPM_EXEC, 20: { args: ['sh', '-c', script], ppid: 10, session: 7 }, 30: WORKER });
      const decision = decideParentWatch({ env: { npm_lifecycle_script: script }, pid: 30, ppid: 20, reader });
      assert.equal(decision.watch, false, script);
      assert.match(decision.why, /detaches it/);
    }
  });

  it('does not watch a worker in a session of its own, even under npm', () => {
    const reader = table({ 10: NPM_EXEC, 30: { ...WORKER, ppid: 10, session: 30 } });
    const decision = decideParentWatch({ env: {}, pid: 30, ppid: 10, reader });
    assert.equal(decision.watch, false);
    assert.match(decision.why, /session of its own/);
  });

  it('does not watch a worker a shell, a launcher or a supervisor started, whatever npm_* variables it inherited', () => {
    const reader = table({
      10: NPM_EXEC,
      20: { args: ['/bin/bash', './start-worker.sh'], ppid: 10, session: 7 },
      21: { args: ['sh', '-c', 'relaybus worker'], ppid: 5, session: 7 },
      30: WORKER,
    });
    const env = { npm_lifecycle_script: 'relaybus worker' };
    assert.equal(decideParentWatch({ env, pid: 30, ppid: 20, reader }).watch, false, 'a launcher script');
    assert.equal(decideParentWatch({ env, pid: 30, ppid: 21, reader }).watch, false, 'a shell npm did not start');
    assert.equal(decideParentWatch({ env: {}, pid: 30, ppid: 1, reader }).watch, false, 'orphaned before it started');
    const gone = decideParentWatch({ env, pid: 30, ppid: 99, reader });
    assert.deepEqual(gone, { watch: false, why: 'its parent (pid 99) is gone already' });
  });

  it('--exit-with-parent and RELAYBUS_EXIT_WITH_PARENT decide over the process tree', () => {
    const launcher = table({ 20: { args: ['/bin/sh', './launch'], ppid: 1, session: 7 }, 30: WORKER });
    const npm = table({ 10: NPM_EXEC, 30: { ...WORKER, ppid: 10 } });
    assert.equal(decideParentWatch({ env: {}, flag: true, pid: 30, ppid: 20, reader: launcher }).watch, true);
    const on = decideParentWatch({ env: { RELAYBUS_EXIT_WITH_PARENT: '1' }, pid: 30, ppid: 20, reader: launcher });
    assert.deepEqual(on, { watch: true, why: 'RELAYBUS_EXIT_WITH_PARENT=1' });
    assert.equal(
      decideParentWatch({ env: { RELAYBUS_EXIT_WITH_PARENT: '0' }, pid: 30, ppid: 10, reader: npm }).watch,
      false,
    );
  });

  it('without /proc, trusts npm_lifecycle_script unless it detaches the command', () => {
    const none = table({});
    assert.equal(
      decideParentWatch({ env: { npm_lifecycle_script: 'relaybus worker' }, pid: 30, ppid: 20, reader: none }).watch,
      true,
    );
    assert.equal(
      decideParentWatch({ env: { npm_lifecycle_script: 'nohup relaybus worker &' }, pid: 30, ppid: 20, reader: none })
        .watch,
      false,
    );
    assert.equal(decideParentWatch({ env: {}, pid: 30, ppid: 20, reader: none }).watch, false);
  });
});

describe('detachesItsCommand and isNpmCommandLine', () => {
  it('tells a background or detaching script from one that runs its command in the foreground', () => {
    for (const script of [
      "'relaybus' worker bus.mjs",
      'cd app && relaybus worker 2>&1',
      'relaybus worker &> log',
      'relaybus worker --handlers "a&b"',
    ])
      assert.equal(detachesItsCommand(script), false, script);
    for (const script of [
      'relaybus worker &',
      'nohup relaybus worker',
      '(setsid relaybus worker)',
      'relaybus worker & disown',
    ])
      assert.equal(detachesItsCommand(script), true, script);
  });

  it('knows npm and npx by their title or entry script', () => {
    assert.equal(isNpmCommandLine(['npm exec relaybus worker']), true);
    assert.equal(isNpmCommandLine(['npm']), true);
    assert.equal(isNpmCommandLine(['node', '/usr/lib/node_modules/npm/bin/npm-cli.js', 'run', 'worker']), true);
    assert.equal(isNpmCommandLine(['/usr/local/bin/npx', 'relaybus']), true);
    assert.equal(isNpmCommandLine(['node', 'npm-helper.js']), false);
    assert.equal(isNpmCommandLine(['sh', '-c', 'npm run worker']), false);
  });

  it('reads this process from /proc on Linux', { skip: process.platform !== 'linux' }, () => {
    assert.equal(procReader.parentOf(process.pid), process.ppid);
    assert.ok((procReader.commandLine(process.pid) ?? []).length > 0);
    assert.equal(typeof procReader.sessionOf(process.pid), 'number');
  });
});
