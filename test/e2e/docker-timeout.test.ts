import { expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { describeDocker, docker, dockerConfig, dockerSuiteHooks, installs, waitFor, type TestInstall } from '../helpers/docker-e2e.js';

/*
 * The command contract of DESIGN §5 on the real engine, through the library: after a timeout
 * nothing more of the line runs and the tree is gone (issue 8, item 11); a fork bomb that took
 * every pid of the sandbox is ended without a new process there, the session works again at
 * once and the notice says exactly what was restored (item 12). Containers use berth's default
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
    expect(r.stderr).toContain("berth: timed out after 500 ms; the command's processes were killed and a new shell took over in /tmp " +
      'with the exported variables, functions and aliases of the old one');
    await sleep(2_500);
    const after = await b.exec(S, 'ls /tmp/f 2>&1; echo "$KEEP"; kf; pwd');
    expect(after.stdout).toBe('ls: /tmp/f: No such file or directory\nkept\nkf-ok\n/tmp\n');

    const g = await b.exec(S, '(sleep 300 & echo $! > /tmp/gc.pid; wait) & sleep 301', { timeoutSeconds: 0.5 });
    expect(g.exitCode).toBe(124);
    // Right after the call returned: the grandchild is gone (or a zombie docker-init has yet to reap).
    const check = await b.exec(S, 'p=$(cat /tmp/gc.pid); read -r l < /proc/$p/stat 2>/dev/null && echo "${l#*) }" | cut -c1; ps -o args | grep -c "^sleep 30[01]"');
    expect(check.stdout).toMatch(/^(Z\n)?0\n$/);
  });

  it('a fork bomb in the foreground: killed at its timeout without a new process, usable again at once', async () => {
    const t = reg.track();
    const b = await openWithState(t);
    const r = await b.exec(S, 'b(){ b|b& }; b; sleep 60', { timeoutSeconds: 3 });
    expect(r.exitCode).toBe(124);
    expect(r.stderr).toContain("berth: timed out after 3000 ms; the command's processes were killed and a new shell took over in /tmp " +
      'with the exported variables, functions and aliases of the old one');
    // docker-init, sleep infinity, the warden and the shell: a handful, right after the call.
    expect(await pidsIn(t)).toBeLessThan(8);
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
    // 50 forks cannot finish in 4 s in a sandbox out of pids (bash waits 1 s, 2 s, … per retry).
    const r = await b.exec(S, 'for i in $(seq 50); do /bin/true; done; echo done', { timeoutSeconds: 4 });
    expect(r.exitCode).toBe(124);
    expect(r.stdout).not.toContain('done');
    expect(r.stderr).toMatch(/berth: timed out after 4000 ms; the command's processes were killed and a new shell took over in \/tmp with the exported variables, functions and aliases of the old one \(unexported variables, shell options and traps are not kept\); the sandbox had no room for a new shell, so the old shell's background jobs were killed too\n$/);
    expect(await pidsIn(t)).toBeLessThan(8);
    const after = await b.exec(S, 'echo "$KEEP"; ls / | wc -l', { timeoutSeconds: 10 });
    expect(after.exitCode, after.output).toBe(0);
    expect(after.stdout).toMatch(/^kept\n\d+\n$/);
  });
});
