import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it, onTestFinished } from 'vitest';
import { parseCgroupMounts } from '../../src/backends/cgroups/proc-files.js';
import type { Broker } from '../../src/broker/broker.js';
import { killAll, pidsWithArg, waitNoneWithArg } from './processes.js';

/*
 * Processes that leave everything berth's tags find a command's processes by (docs/design.md §5):
 * their environment (`env -i` drops BERTH_CMD_TAG and BERTH_SHELL_TAG), their session and process
 * group (`setsid`), their parentage (a double fork leaves them to the sandbox's init) and their
 * name. Only the kernel's grouping still holds them. One suite, run against each backend that has
 * it; the host's /proc shows every sandbox's processes (the tests run as root on the host), each
 * found by a marker argument of its own.
 */

/** What a backend's sandbox lets the suite try on top of the escapes every backend must end. */
export interface EscapeSuiteOptions {
  /** Open a broker on the backend (one sandbox per session). */
  open: () => Promise<Broker>;
  /**
   * The sandbox's commands cannot write to the cgroup hierarchy (a container, a namespace
   * sandbox): a command that tries to move itself out of its group must fail to. Not on local,
   * where a command runs as berth's own user.
   */
  cgroupfsClosed: boolean;
  /** The sandbox bounds its processes, so an escaped fork bomb may run in it. */
  bounded: boolean;
  /**
   * Where a shell's emptied groups go: berth's orphan pass (its own host's groups, default), or the
   * shell's own steps and its sandbox's removal only (ssh: the groups are on the sandbox's host).
   */
  emptyGroupsGo?: 'orphan-pass' | 'with-shell';
}

/** One escape: a long-lived process started with `mark` among its arguments; it leaves file `file` in `dir` once it runs. */
interface Escape {
  name: string;
  file: string;
  line: (mark: string, dir: string) => string;
}

const LOOP = 'while :; do sleep 1; done';

const ESCAPES: Escape[] = [
  // A new session, an empty environment.
  { name: 'env -i setsid', file: 'a', line: (m, d) => `env -i setsid sh -c ': > "$1/a"; ${LOOP}' ${m} ${d} >/dev/null 2>&1 &` },
  // A double fork: the grandchild is the sandbox init's, with no tag and no session of the shell's.
  { name: 'double fork', file: 'b', line: (m, d) => `env -i sh -c '(setsid sh -c ": > \\"\\$1/b\\"; ${LOOP}" "$0" "$1" &)' ${m} ${d} >/dev/null 2>&1` },
  // It renames itself as well.
  { name: 'renamed', file: 'c', line: (m, d) => `env -i setsid bash -c 'printf innocent > /proc/$$/comm; : > "$1/c"; ${LOOP}' ${m} ${d} >/dev/null 2>&1 &` },
];

/** Tries to move itself to the hierarchy's root (as root on the host it would succeed) before it escapes. */
const CGROUPFS: Escape = {
  name: 'cgroupfs write',
  file: 'd',
  line: (m, d) => `sh -c 'for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do echo $$ > "$f"; done 2>/dev/null; ` +
    `: > "$1/d"; exec env -i setsid sh -c "${LOOP}" "$0"' ${m} ${d} >/dev/null 2>&1 &`,
};

/** A fork bomb that escaped first (bounded sandboxes only): it takes every pid the sandbox may have. */
const BOMB: Escape = {
  name: 'fork bomb',
  file: 'e',
  line: (m, d) => `env -i setsid bash -c ': > "$1/e"; b(){ b|b& }; b' ${m} ${d} >/dev/null 2>&1 &`,
};

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The host's cgroup2 mount: a group's path as /proc/PID/cgroup names it is under it (berth's cgroup namespace is the host's here). */
function unifiedMount(): string {
  const mount = parseCgroupMounts(readFileSync('/proc/self/mountinfo', 'utf8')).unified;
  if (mount === undefined) throw new Error('no cgroup2 hierarchy is mounted');
  return mount;
}

/** A marker argument per escape, and a line that starts them all (in `dir`, under the sandbox's $HOME), then waits. */
function escapes(list: readonly Escape[]): { marks: string[]; line: string; dir: string; files: string } {
  const id = randomBytes(4).toString('hex');
  const dir = `"$HOME/esc-${id}"`;
  const marks = list.map((e) => `berth-esc-${id}-${e.name.replace(/\W+/g, '-')}`);
  const starts = list.map((e, i) => e.line(marks[i] as string, dir)).join('\n');
  const files = list.map((e) => e.file).sort().join(' ');
  return { marks, dir, files, line: `mkdir -p ${dir}\n${starts}\nsleep 60` };
}

/**
 * Every mark's processes are killed when the test ends, whatever it found, with their process
 * groups (a loop's `sleep 1`), and gone before its broker closes.
 */
function cleanUp(marks: readonly string[]): void {
  onTestFinished(async () => {
    for (const m of marks) killAll(pidsWithArg(m).flatMap((pid) => [pid, -pid]));
    for (const m of marks) await waitNoneWithArg(m);
  });
}

/**
 * Each mark has a live process, seen in three looks in a row (the escape ran, and it is not just a
 * process that carried the mark a moment before it forked the escaped one and ended).
 */
async function allRunning(marks: readonly string[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (let seen = 0; seen < 3; seen = marks.every((m) => pidsWithArg(m).length > 0) ? seen + 1 : 0) {
    expect(Date.now() < deadline, `not all of ${marks.join(', ')} started`).toBe(true);
    await sleep(50);
  }
}

/** Live processes of each mark, for a message that names what survived. */
function survivors(marks: readonly string[]): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const m of marks) {
    const pids = pidsWithArg(m);
    if (pids.length > 0) out[m] = pids;
  }
  return out;
}

/** A process of the session's shell that runs on in the background (an earlier `cmd &`), by its marker. */
/**
 * How many of `earlierJob`'s loops run: the loop forks a child for each sleep, which carries the
 * loop's argv until it execs (longer on a busy machine), so the fewest of a few looks.
 */
async function loopsRunning(keep: string): Promise<number> {
  const looks: number[] = [];
  for (let i = 0; i < 5; i++) {
    looks.push(pidsWithArg(keep).length);
    await new Promise((r) => setTimeout(r, 60));
  }
  return Math.min(...looks);
}

async function earlierJob(b: Broker, scope: { session: string }): Promise<string> {
  const keep = `berth-keep-${randomBytes(4).toString('hex')}`;
  cleanUp([keep]);
  expect((await b.exec(scope, `bash -c '${LOOP}' ${keep} >/dev/null 2>&1 &`)).exitCode).toBe(0);
  return keep;
}

/**
 * The suite: a command's processes end at its timeout, at a client's disconnect and at its job's
 * kill, whatever they did to their environment, session, parentage or name; an earlier `cmd &` of
 * the same shell keeps running; the session works on.
 */
export function escapeSuite(o: EscapeSuiteOptions): void {
  const list = [...ESCAPES, ...(o.cgroupfsClosed ? [CGROUPFS] : [])];
  const S = { session: 'escapes' };

  it('a timeout ends every escaped process before the call returns, and an earlier background job keeps running', async () => {
    const b = await o.open();
    const keep = await earlierJob(b, S);
    const e = escapes(list);
    cleanUp(e.marks);
    const r = await b.exec(S, e.line, { timeoutSeconds: 6 });
    expect(r.exitCode, r.output).toBe(124);
    expect(survivors(e.marks)).toEqual({});
    expect(await loopsRunning(keep)).toBe(1);
    // They all ran (each left its file), and the session works on.
    const after = await b.exec(S, `ls ${e.dir} | tr '\\n' ' '`, { timeoutSeconds: 20 });
    expect(after.stdout).toBe(`${e.files} `);
  });

  it('a client that goes away (the call\'s signal) ends every escaped process before the call returns', async () => {
    const b = await o.open();
    const e = escapes(list);
    cleanUp(e.marks);
    const ac = new AbortController();
    const call = b.exec(S, e.line, { signal: ac.signal, timeoutSeconds: 60 });
    await allRunning(e.marks);
    ac.abort();
    const r = await call;
    expect(r.exitCode, r.output).toBe(130);
    expect(survivors(e.marks)).toEqual({});
    expect((await b.exec(S, 'echo on', { timeoutSeconds: 20 })).stdout).toBe('on\n');
  });

  it('a background job\'s kill ends every escaped process of the job', async () => {
    const b = await o.open();
    const e = escapes(list);
    cleanUp(e.marks);
    const { jobId } = await b.jobs.start(S, e.line);
    await allRunning(e.marks);
    expect(await b.jobs.kill(S, jobId)).toEqual({ killed: true });
    expect(survivors(e.marks)).toEqual({});
    expect((await b.jobs.read(S, jobId, { maxBytes: 0 })).status).toBe('killed');
    // The shell that started the job was not in the job's group.
    expect((await b.exec(S, 'echo on', { timeoutSeconds: 20 })).stdout).toBe('on\n');
  });

  it('a job keeps running when a later command of the same shell times out, and its own kill still ends it', async () => {
    const b = await o.open();
    const e = escapes(list);
    cleanUp(e.marks);
    const { jobId } = await b.jobs.start(S, e.line);
    await allRunning(e.marks);
    const r = await b.exec(S, 'sleep 30', { timeoutSeconds: 1 });
    expect(r.exitCode).toBe(124);
    await sleep(200);
    expect(Object.keys(survivors(e.marks)).sort()).toEqual([...e.marks].sort());
    expect(await b.jobs.kill(S, jobId)).toEqual({ killed: true });
    expect(survivors(e.marks)).toEqual({});
  });

  it('a shell made to report another pid (a `builtin` function in its snapshot) still has its commands ended, and that pid\'s process is left alone', async () => {
    const b = await o.open();
    const keep = await earlierJob(b, S);
    // The decoy: the earlier job, by its pid as the sandbox sees it (were berth to believe the lie,
    // it would stop it, sweep its children, and group it as the shell).
    expect((await b.exec(S, 'export DECOY=$!; echo $DECOY')).stdout).toMatch(/^\d+\n$/);
    // Every `builtin X` of berth's own code goes through this function once the next shell sources
    // the snapshot: it passes all through, but makes the init's trailer (which carries `$$`) say DECOY.
    const lie = 'builtin() { if [ "$1" = printf ] && [ "$2" = \'%s~%d %s%s~\' ] && [ "$4" = "$$" ]; then command builtin printf "$2" "$3" "$DECOY" "$5" "$6"; else command builtin "$@"; fi; }';
    expect((await b.exec(S, lie)).exitCode).toBe(0);
    // A timeout replaces the shell: the new one sources the snapshot, function and all.
    expect((await b.exec(S, 'sleep 30', { timeoutSeconds: 1 })).exitCode).toBe(124);
    expect((await b.exec(S, 'type -t builtin')).stdout).toBe('function\n');
    const e = escapes(list);
    cleanUp(e.marks);
    const r = await b.exec(S, e.line, { timeoutSeconds: 6 });
    expect(r.exitCode, r.output).toBe(124);
    expect(survivors(e.marks)).toEqual({});
    expect((await b.exec(S, `ls ${e.dir} | tr '\\n' ' '`, { timeoutSeconds: 20 })).stdout).toBe(`${e.files} `);
    const [decoy] = pidsWithArg(keep);
    expect(decoy, 'the decoy was killed').toBeDefined();
    expect(readFileSync(`/proc/${decoy}/stat`, 'latin1'), 'the decoy was stopped').toMatch(/\) [SR] /);
  });

  it(`groups left empty by ended background processes go${o.emptyGroupsGo === 'with-shell' ? '' : ' in the orphan pass'}, and every group goes with its sandbox`, async () => {
    const b = await o.open();
    const mount = unifiedMount();
    // The background process stays in the first command's group; the next command moves on.
    const first = await b.exec(S, 'sleep 0.3 >/dev/null 2>&1 & sed -n "s/^0:://p" /proc/self/cgroup');
    const second = await b.exec(S, 'sed -n "s/^0:://p" /proc/self/cgroup');
    const [left, current] = [join(mount, first.stdout.trim()), join(mount, second.stdout.trim())];
    expect(left).not.toBe(current);
    // The kernel says when the background sleep has ended (on a busy machine, maybe well after 0.3 s).
    const populated = (): boolean => /^populated 1$/m.test(readFileSync(join(left, 'cgroup.events'), 'utf8'));
    for (const deadline = Date.now() + 10_000; populated() && Date.now() < deadline;) await sleep(50);
    expect(populated(), `the first group ${left} still holds a process`).toBe(false);
    if (o.emptyGroupsGo !== 'with-shell') {
      expect(existsSync(left), 'the first group, empty now, is still there before the pass').toBe(true);
      await b.reapers.reapOrphans();
      expect(existsSync(left)).toBe(false);
    }
    expect(existsSync(current)).toBe(true);
    await b.closeSession(S);
    expect(existsSync(current)).toBe(false);
  });

  if (!o.bounded) return;

  it('an escaped fork bomb ends at the timeout with the command, and an earlier background job keeps running', async () => {
    const b = await o.open();
    const keep = await earlierJob(b, S);
    const e = escapes([BOMB]);
    cleanUp(e.marks);
    const r = await b.exec(S, e.line, { timeoutSeconds: 6 });
    expect(r.exitCode, r.output).toBe(124);
    expect(survivors(e.marks)).toEqual({});
    expect(await loopsRunning(keep)).toBe(1);
    // Nothing else had to go: the notice says the earlier job runs on.
    expect(r.stderr).toMatch(/a new shell took over in \S+ with the exported variables, functions and aliases of the old one \(unexported variables, shell options and traps are not kept\); 1 background job\(s\) of earlier commands keep running, outside the new shell's job table\n$/);
    expect((await b.exec(S, `ls ${e.dir}`, { timeoutSeconds: 20 })).stdout).toBe('e\n');
  });

  it('a job that became an escaped fork bomb is killed, though the sandbox has no pid left for a look inside first', async () => {
    const b = await o.open();
    const e = escapes([BOMB]);
    cleanUp(e.marks);
    const { jobId } = await b.jobs.start(S, e.line);
    await allRunning(e.marks);
    expect(await b.jobs.kill(S, jobId)).toEqual({ killed: true });
    expect(survivors(e.marks)).toEqual({});
    expect((await b.exec(S, 'echo on', { timeoutSeconds: 20 })).stdout).toBe('on\n');
  });
}
