import { expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { runBerth } from '../helpers/cli.js';
import {
  describeDocker, docker, dockerConfig, dockerConfigYaml, dockerSuiteHooks, installs, waitFor, type TestInstall,
} from '../helpers/docker-e2e.js';

/*
 * The command contract of docs/design.md §5 on the real engine, through the library: after a timeout
 * nothing more of the line runs and the tree is gone; a fork bomb that took
 * every pid of the sandbox is ended without a new process there, the session works again at
 * once and the notice says exactly what was restored. Containers use berth's default
 * pids limit (512).
 */

const reg = installs('berth-dtimeout-');
const S = { session: 'contract' };

/** Processes in the sandbox's container, as the engine counts them (host side: no exec needed). */
async function pidsIn(t: TestInstall): Promise<number> {
  const [c] = await t.containers();
  if (c === undefined) throw new Error('no container');
  const stats = (await docker.getContainer(c.id).stats({ stream: false })) as { pids_stats?: { current?: number } };
  return stats.pids_stats?.current ?? -1;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function openWithState(t: TestInstall): Promise<Broker> {
  const b = await t.open(dockerConfig({ persistent: false }));
  const r = await b.exec(S, 'export KEEP=kept; kf() { echo kf-ok; }; cd /tmp');
  expect(r.exitCode, r.output).toBe(0);
  return b;
}

describeDocker('timeouts and fork bombs on the real docker engine', () => {
  dockerSuiteHooks(reg);

  it('runs nothing more of a timed-out line, kills background grandchildren, and keeps the state', async () => {
    const t = reg.track();
    const b = await openWithState(t);
    const r = await b.exec(S, 'echo partial; sleep 2; echo not-reached; touch /tmp/f', { timeoutSeconds: 0.5 });
    expect(r.exitCode).toBe(124);
    expect(r.stdout).toBe('partial\n');
    expect(r.stderr).toBe("berth: timed out after 500 ms; the command's processes were killed and a new shell took over in /tmp " +
      'with the exported variables, functions and aliases of the old one (unexported variables, shell options and traps are not kept)\n');
    await sleep(2_500);
    const after = await b.exec(S, 'ls /tmp/f 2>&1; echo "$KEEP"; kf; pwd');
    expect(after.stdout).toBe('ls: /tmp/f: No such file or directory\nkept\nkf-ok\n/tmp\n');

    // The command's own stderr stays, a line that looks like bash's job report included; bash's
    // reports of the jobs the kill ended ("bash: line 1: 12 Killed ...") do not: berth's one line says it.
    const fake = '/dev/fd/3: line 1:    9 Killed                  fake';
    const g = await b.exec(S, `echo own-err >&2; echo '${fake}' >&2; (sleep 300 & echo $! > /tmp/gc.pid; wait) & sleep 301`, { timeoutSeconds: 0.5 });
    expect(g.exitCode).toBe(124);
    expect(g.stderr).toMatch(new RegExp(`^own-err\n${fake}\nberth: timed out after 500 ms; [^\n]*\n$`));
    // Right after the call returned: the grandchild is gone (or a zombie docker-init has yet to reap).
    const check = await b.exec(S, 'p=$(cat /tmp/gc.pid); read -r l < /proc/$p/stat 2>/dev/null && echo "${l#*) }" | cut -c1; ps -o args | grep -c "^sleep 30[01]"');
    expect(check.stdout).toMatch(/^(Z\n)?0\n$/);
  });

  it('a fork bomb in the foreground: killed at its timeout without a new process, usable again at once, earlier jobs kept', async () => {
    const t = reg.track();
    const b = await openWithState(t);
    expect((await b.exec(S, 'sleep 600 &')).exitCode).toBe(0);
    const r = await b.exec(S, 'b(){ b|b& }; b; sleep 60', { timeoutSeconds: 3 });
    expect(r.exitCode).toBe(124);
    // The bomb was the command's own: with it gone there is room, so the earlier job is not touched.
    expect(r.stderr).toMatch(new RegExp("berth: timed out after 3000 ms; the command's processes were killed and a new shell took over in /tmp " +
      'with the exported variables, functions and aliases of the old one \\(unexported variables, shell options and traps are not kept\\); ' +
      "1 background job\\(s\\) of earlier commands keep running, outside the new shell's job table\n$"));
    // docker-init, the warden (the main process), the shell and the earlier job: a handful, right after the call.
    expect(await pidsIn(t)).toBeLessThan(8);
    expect((await b.exec(S, 'ps -o args | grep -c "^sleep 600"')).stdout).toBe('1\n');
    const after = await b.exec(S, 'echo "$KEEP"; kf; for i in 1 2 3; do /bin/true; done; ls / | wc -l', { timeoutSeconds: 10 });
    expect(after.exitCode, after.output).toBe(0);
    expect(after.stdout).toMatch(/^kept\nkf-ok\n\d+\n$/);
  });

  it('a fork bomb left as a background job: the next timeout ends it and says the jobs were killed', async () => {
    const t = reg.track();
    const b = await openWithState(t);
    // The line of the report: it returns at once, the bomb grows as a background job.
    const bomb = await b.exec(S, 'b(){ b|b& }; b');
    expect(bomb.exitCode).toBe(0);
    expect(await waitFor(async () => (await pidsIn(t)) >= 500, 30_000, 250)).toBe(true);
    // Forks in a sandbox out of pids (bash waits 1 s, 2 s, … per retry), then a sleep: a bomb
    // starved of CPU on a busy machine may leave room for the forks, never for the sleep.
    const r = await b.exec(S, 'for i in $(seq 50); do /bin/true; done; sleep 60; echo done', { timeoutSeconds: 4 });
    expect(r.exitCode).toBe(124);
    expect(r.stdout).not.toContain('done');
    // The shell, stuck in bash's fork retries, usually saves its state before it ends; on a
    // starved machine it may be killed first. Either way the line says which, exactly.
    const saved = /berth: timed out after 4000 ms; the command's processes were killed and a new shell took over in \/tmp with the exported variables, functions and aliases of the old one \(unexported variables, shell options and traps are not kept\); the sandbox had no room for a new shell, so the old shell's background jobs were killed too\n$/;
    const lost = /berth: timed out after 4000 ms; the command's processes were killed and the old shell could not save its state: a new shell took over in \/tmp; the exported variables, functions and aliases of the old one were lost \(unexported variables, shell options and traps are not kept\); the sandbox had no room for a new shell, so the old shell's background jobs were killed too\n$/;
    expect(saved.test(r.stderr) || lost.test(r.stderr), r.stderr).toBe(true);
    expect(await pidsIn(t)).toBeLessThan(8);
    const after = await b.exec(S, 'echo "[$KEEP]"; ls / | wc -l', { timeoutSeconds: 10 });
    expect(after.exitCode, after.output).toBe(0);
    expect(after.stdout).toMatch(saved.test(r.stderr) ? /^\[kept\]\n\d+\n$/ : /^\[\]\n\d+\n$/);
  });

  it('CLI: a timed-out line stops, and a fork bomb is gone when its call returns', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const berth = (...args: string[]) => runBerth(['exec', '--session', 'cli', ...args], { env: t.env, cwd: t.dir, timeoutMs: 90_000 });
    const r = await berth('--timeout', '0.5', '--', 'sleep 2; echo not-reached; touch /tmp/f');
    expect(r.code).toBe(124);
    expect(r.stdout).toBe('');
    await sleep(2_500);
    expect(await berth('--', 'ls /tmp/f 2>&1')).toMatchObject({ code: 1, stdout: 'ls: /tmp/f: No such file or directory\n' });

    // A CLI process starts its warden once the command has run 300 ms, racing the bomb: it ends
    // the bomb at the timeout, or, if the bomb took every pid first, berth restarts the sandbox.
    const bomb = await berth('--timeout', '3', '--', 'export KEEP=kept; b(){ b|b& }; b; sleep 60');
    expect(bomb.code).toBe(124);
    const tookOver = "berth: timed out after 3000 ms; the command's processes were killed and a new shell took over in /workspace " +
      'with the exported variables, functions and aliases of the old one';
    const restarted = /berth: no new process could start in sandbox "session:cli" \(\d+ of 512 pids in use\), so it was restarted: every process in it was killed and \/root, \/tmp, \/workspace \(tmpfs\) were emptied\n$/;
    const kept = bomb.stderr.includes(tookOver) && !restarted.test(bomb.stderr);
    expect(kept || restarted.test(bomb.stderr), bomb.stderr).toBe(true);
    expect(await pidsIn(t)).toBeLessThan(8);
    expect(await berth('--', 'echo "[$KEEP]"; ls / | wc -l')).toMatchObject({
      code: 0, stdout: expect.stringMatching(kept ? /^\[kept\]\n\d+\n$/ : /^\[\]\n\d+\n$/) as unknown,
    });
  });

  it('CLI: after a timeout the notice, the recorded cwd and the next process agree on where the new shell is', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const berth = (...args: string[]) => runBerth(['exec', '--session', 'agree', ...args], { env: t.env, cwd: t.dir, timeoutMs: 90_000 });
    expect(await berth('--', 'mkdir -p /workspace/before && cd /workspace/before')).toMatchObject({ code: 0 });
    const r = await berth('--timeout', '1', '--', 'cd /tmp && export MOVED=yes && sleep 30');
    expect(r.code).toBe(124);
    expect(r.stderr).toContain("the command's processes were killed and a new shell took over in /tmp with the exported variables");
    const next = await berth('--json', '--', 'pwd; echo "[$MOVED]"');
    expect(JSON.parse(next.stdout)).toMatchObject({ exitCode: 0, stdout: '/tmp\n[yes]\n', cwd: '/tmp' });
    const explained = JSON.parse((await runBerth(['explain', '--json', '--session', 'agree'], { env: t.env, cwd: t.dir })).stdout) as { cwd: string };
    expect(explained.cwd).toBe('/tmp');
  });

  it('a bomb that killed the warden first: still ended, and the notice says how', async () => {
    const t = reg.track();
    const b = await openWithState(t);
    // The warden opens beside the first shell; give it time, then every bash but this shell goes.
    await b.exec(S, 'sleep 2');
    const killWarden = 'for p in /proc/[0-9]*; do read -r c < $p/comm; [ "$c" = bash ] && [ "${p#/proc/}" != $$ ] && kill -9 ${p#/proc/}; done';
    const r = await b.exec(S, `${killWarden}; b(){ b|b& }; b; sleep 60`, { timeoutSeconds: 3 });
    // Timed out (124), or the shell itself was OOM-killed by the bomb first (137). Then: a new
    // warden ended the bomb and a new shell took over, or no process could start and berth
    // restarted the sandbox. Each line says exactly what the next shell has.
    expect([124, 137], r.stderr).toContain(r.exitCode);
    const head = r.exitCode === 124 ? "berth: timed out after 3000 ms; the command's processes were killed and "
      : 'berth: the shell was killed by signal 9 (out of memory, or killed); ';
    const tookOver = `${head}a new shell took over in /tmp with the exported variables, functions and aliases of the old one`;
    const restarted = /berth: no new process could start in sandbox "session:contract" \(\d+ of 512 pids in use\), so it was restarted: every process in it was killed and \/root, \/tmp, \/workspace \(tmpfs\) were emptied\n$/;
    const kept = r.stderr.includes(tookOver) && !restarted.test(r.stderr);
    // The warden is the container's main process: killing it stops the container, which ends the
    // bomb with everything else; the next call starts the sandbox again and says what that took.
    const stopped = r.stderr.includes('no new shell could be started') && r.stderr.includes('is not running');
    expect(kept || stopped || restarted.test(r.stderr) || r.stderr.includes(`${head}the old shell could not save its state`), r.stderr).toBe(true);
    const after = await b.exec(S, 'echo "[$KEEP]"; ls / | wc -l', { timeoutSeconds: 20 });
    expect(after.exitCode, after.output).toBe(0);
    expect(after.stdout).toMatch(kept ? /^\[kept\]\n\d+\n$/ : /^\[\]\n\d+\n$/);
    if (stopped) {
      expect(after.stderr).toMatch(/^berth: sandbox "session:contract" had stopped \(its main process ended, or it was stopped from outside\), so it was started again: every process in it had ended and \/root, \/tmp, \/workspace \(tmpfs\) were emptied\n$/);
    }
    expect(await pidsIn(t)).toBeLessThan(8);
  });
});
