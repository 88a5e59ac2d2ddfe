import { afterEach, expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { runBerth } from '../helpers/cli.js';
import { containerFor, containerState, describeDocker, docker, dockerConfig, dockerConfigYaml, installs, waitFor } from '../helpers/docker-e2e.js';
import { bwrapInstall, describeBwrap, testRange } from '../helpers/bwrap.js';
import { call, stdioConn } from '../helpers/mcp-clients.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * Hibernation on real engines: a persistent sandbox idle for `hibernateSeconds` is stopped with
 * its files and its shells' saved state; the next call resumes it and says what came back and what
 * did not; a sandbox with a running job never hibernates, nor one where a command left a process
 * outside its shell's job table; a sandbox whose process ended (a CLI
 * call) is hibernated by a long-lived berth; a berth restart resumes it. 10 s is the shortest
 * hibernateSeconds, so each test waits about that long.
 */

const reg = installs('berth-hib-');
afterEach(stopAll);

/** One persistent sandbox per session, hibernated after 10 s; its session stays open (idleSeconds) across that. */
const HIBERNATING = { scope: 'session', persistent: true, lifecycle: { idleSeconds: 3600, hibernateSeconds: 10 } };

/** Leaves cwd, an exported variable, a function, an alias, an unexported variable and a file. */
const SET_UP = "mkdir -p ~/sub && cd ~/sub && export KEEP=kept && f() { echo fn-ok; } && alias al='echo alias-ok' && LOCAL=lost && echo data > file";
/** Leaves a process that no shell's job table lists (`(cmd &)`: the subshell ends, its child is the sandbox's init's). */
const LEAVE_DAEMON = '(sleep 120 > /dev/null 2>&1 < /dev/null &); sleep 0.2; [ -z "$(jobs -p)" ] && echo no jobs';
/** Prints what survived, one line each. */
const CHECK = 'pwd; echo "$KEEP"; f; al; echo "[${LOCAL-}]"; cat file';

function expectResumedWithState(r: Awaited<ReturnType<Broker['exec']>>, home: string): void {
  expect(r.stdout).toBe(`${home}/sub\nkept\nfn-ok\nalias-ok\n[]\ndata\n`);
  expect(r.sandboxResumed?.restored).toEqual(['files', 'cwd', 'exported variables', 'functions', 'aliases']);
  expect(r.sandboxResumed?.lost).toEqual(expect.arrayContaining(['running processes', 'unexported variables', 'shell options', 'traps']));
}

describeDocker('hibernation on docker', () => {
  afterEach(() => reg.cleanupAll());

  it('an idle persistent sandbox hibernates and resumes with files, cwd and exported state, in this broker and after a restart; one with a job never does', async () => {
    const t = reg.track();
    // Its sessions outlive it (as a CLI's or a crashed server's do): a closing broker that holds
    // them closes them, and a closed session starts again in the default cwd.
    const b = await t.open(dockerConfig(HIBERNATING), { holdSessions: false });
    // A process left outside the shell's job table (a subshell's `&`, as a daemon forks) runs too.
    // Used first, so it is idle longer than the ones that hibernate by the time they do.
    expect((await b.exec({ session: 'daemon' }, LEAVE_DAEMON)).stdout).toBe('no jobs\n');
    for (const session of ['a', 'restart']) expect((await b.exec({ session }, SET_UP)).exitCode).toBe(0);
    const job = await b.session({ session: 'busy' }).jobs.start('sleep 120');
    expect(job.jobId).toBeTruthy();
    const [a, restart, busy, daemon] = await Promise.all(['a', 'restart', 'busy', 'daemon'].map((s) => containerFor(t.installation, `session:${s}`)));

    // Hibernated means the record says so (written once the engine's stop has answered), not
    // only that the container stopped: between the two `ls` says "stopped".
    const stateOf = async (): Promise<Record<string, string>> => Object.fromEntries((await b.listWithState('local')).map((s) => [s.sandboxKey, s.state]));
    const hibernated = await waitFor(async () => {
      const s = await stateOf();
      return s['session:a'] === 'hibernated' && s['session:restart'] === 'hibernated';
    }, 40_000, 500);
    expect(hibernated).toBe(true);
    expect((await containerState(a!.id))?.running).toBe(false);
    expect((await containerState(restart!.id))?.running).toBe(false);
    expect((await containerState(busy!.id))?.running).toBe(true);
    expect((await containerState(daemon!.id))?.running).toBe(true);
    const states = await stateOf();
    expect(states['session:busy']).toBe('active');
    expect(states['session:daemon']).toBe('active');
    expect((await b.exec({ session: 'daemon' }, 'cat /proc/[0-9]*/comm 2>/dev/null | grep -qx sleep && echo alive')).stdout).toBe('alive\n');
    expect(b.explain({ session: 'a' }).lifecycle).toMatchObject({ whenIdle: 'hibernated', afterSeconds: 10, hibernatedMs: expect.any(Number) });

    const resumed = await b.exec({ session: 'a' }, CHECK);
    expectResumedWithState(resumed, '/root');
    expect(resumed.sandboxResumed?.lost).toContain('/tmp (tmpfs)');
    expect((await containerState(a!.id))?.running).toBe(true);
    expect((await b.exec({ session: 'a' }, 'true')).sandboxResumed).toBeUndefined();
    expect(b.explain({ session: 'a' }).lifecycle.hibernatedMs).toBeUndefined();

    await b.close();
    const next = await t.open(dockerConfig(HIBERNATING));
    expectResumedWithState(await next.exec({ session: 'restart' }, CHECK), '/root');
    expect((await containerFor(t.installation, 'session:restart')).id).toBe(restart!.id);
  }, 90_000);

  it('a sandbox a CLI call left running is hibernated by a long-lived berth once the job that call left ended; the next CLI call resumes it and says so', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(HIBERNATING));
    // The job outlives hibernateSeconds: hibernating at 10 s would kill it before it writes (no
    // shell of a live process knows of it: the sweep reads the container's cgroups).
    const first = await runBerth(['exec', '--session', 'cli', '--', `(sleep 16; echo finished > /root/job-done) > /dev/null 2>&1 & ${SET_UP}`], { env: t.env, cwd: t.dir });
    expect(first.code, first.stderr).toBe(0);
    const c = await containerFor(t.installation, 'session:cli');
    expect((await containerState(c.id))?.running).toBe(true);

    const keeper = await t.open(dockerConfig(HIBERNATING), { holdSessions: true });
    expect(await waitFor(async () => (await containerState(c.id))?.running === false, 40_000, 500)).toBe(true);
    await keeper.close();

    const ls = await runBerth(['ls'], { env: t.env, cwd: t.dir });
    expect(ls.stdout).toMatch(/^session:cli +docker +hibernated /m);
    const explained = await runBerth(['explain', '--session', 'cli'], { env: t.env, cwd: t.dir });
    expect(explained.stdout).toMatch(/^lifecycle +hibernated after 10 s idle; hibernated since \S+, the next call resumes it$/m);
    const again = await runBerth(['exec', '--session', 'cli', '--', CHECK], { env: t.env, cwd: t.dir });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toBe('/root/sub\nkept\nfn-ok\nalias-ok\n[]\ndata\n');
    expect(again.stderr).toMatch(/^berth: sandbox "session:cli" was hibernated \d+ s ago and resumed for this command: kept files, cwd, exported variables, functions, aliases; not kept: running processes, unexported variables, shell options, traps/m);
    const json = await runBerth(['exec', '--session', 'cli', '--json', '--', 'cat /root/job-done'], { env: t.env, cwd: t.dir });
    expect(JSON.parse(json.stdout)).not.toHaveProperty('sandboxResumed');
    expect(JSON.parse(json.stdout)).toMatchObject({ exitCode: 0, stdout: 'finished\n' });
  }, 90_000);

  it('limits.liveSandboxes: a call past the bound hibernates the least recently used idle sandbox instead of starting one more; its next call resumes it', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ ...HIBERNATING, limits: { liveSandboxes: 2 } }));
    expect((await b.exec({ session: 'a' }, SET_UP)).exitCode).toBe(0);
    expect((await b.exec({ session: 'b' }, 'echo b > ~/b')).exitCode).toBe(0);
    const [a, bb] = await Promise.all(['a', 'b'].map((s) => containerFor(t.installation, `session:${s}`)));
    // b was used last: a is the one to go when c needs room.
    expect((await b.exec({ session: 'c' }, 'echo c')).stdout).toBe('c\n');
    expect((await containerState(a!.id))?.running).toBe(false);
    expect((await containerState(bb!.id))?.running).toBe(true);
    const states = Object.fromEntries((await b.listWithState('local')).map((s) => [s.sandboxKey, s.state]));
    expect(states).toMatchObject({ 'session:a': 'hibernated', 'session:b': 'active', 'session:c': 'active' });
    // A sandbox whose job runs is never the one to go, however long ago its last call was.
    await b.session({ session: 'b' }).jobs.start('sleep 120');
    expect((await b.exec({ session: 'c' }, 'true')).exitCode).toBe(0);
    const resumed = await b.exec({ session: 'a' }, CHECK);
    expectResumedWithState(resumed, '/root');
    const c = await containerFor(t.installation, 'session:c');
    expect((await containerState(c!.id))?.running).toBe(false);
    expect((await containerState(bb!.id))?.running).toBe(true);
    expect((await b.listWithState('local')).filter((s) => s.state !== 'hibernated')).toHaveLength(2);
  }, 90_000);

  it('two berth processes on one home: one never hibernates, snapshots nor restores the sandbox while the other runs a command in it', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(HIBERNATING));
    const a = await t.open(dockerConfig(HIBERNATING), { holdSessions: true });
    expect((await a.exec({ session: 'shared' }, 'echo a > ~/from-a')).exitCode).toBe(0);
    await a.snapshots.create({ session: 'shared' }, { name: 'before' });
    // This broker holds it live (idle from now on); another process brings it up too and runs a
    // command past this broker's hibernateSeconds.
    expect((await a.exec({ session: 'shared' }, 'true')).exitCode).toBe(0);
    const other = runBerth(['exec', '--session', 'shared', '--timeout', '80', '--', 'sleep 20; echo b-done'], { env: t.env, cwd: t.dir, timeoutMs: 90_000 });
    const c = await containerFor(t.installation, 'session:shared');
    expect(await waitFor(async () => (await docker.getContainer(c!.id).top()).Processes.some((p: string[]) => p.join(' ').includes('sleep 20')), 30_000, 250)).toBe(true);
    for (const refused of [a.snapshots.restore({ session: 'shared' }, 'before'), a.snapshots.create({ session: 'shared' }, { name: 'during' })]) {
      const err = await refused.then(() => undefined, (e: unknown) => e);
      expect((err as { code?: string }).code).toBe('sandbox_busy');
      expect((err as Error).message).toMatch(/another berth process \(pid \d+\) holds it/);
    }
    const b = await other;
    expect(b.code, b.stderr).toBe(0);
    expect(b.stdout).toBe('b-done\n');
    expect((await containerState(c!.id))?.running).toBe(true);
  }, 120_000);

  it('through HTTP and MCP: the sandbox list says hibernated, the next result says resumed and what was kept', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(HIBERNATING));
    const server = await ServeProcess.start(t);
    const api = server.client(await createToken(t, 'acme'));
    const set = await api.post<{ exitCode: number }>('/v1/exec', { session: 'h', command: SET_UP });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    const mcp = await stdioConn({ cwd: t.dir, env: t.env });
    try {
      expect((await call(mcp, 'terminal', { command: 'cd /tmp && export VIA=mcp' })).isError).toBe(false);
      const stateOf = async (): Promise<string | undefined> =>
        ((await api.get<Array<{ sandboxKey: string; state: string }>>('/v1/sandboxes')).body).find((s) => s.sandboxKey === 'session:h')?.state;
      expect(await waitFor(async () => (await stateOf()) === 'hibernated', 40_000, 500)).toBe(true);
      const r = await api.post<{ stdout: string; sandboxResumed?: { restored: string[]; lost: string[] } }>('/v1/exec', { session: 'h', command: CHECK });
      expect(r.body.stdout).toBe('/root/sub\nkept\nfn-ok\nalias-ok\n[]\ndata\n');
      expect(r.body.sandboxResumed?.restored).toEqual(['files', 'cwd', 'exported variables', 'functions', 'aliases']);

      const mcpSandbox = (await t.containers()).find((c) => c.labels['berth.key'] !== 'session:h');
      expect(mcpSandbox).toBeDefined();
      expect(await waitFor(async () => (await containerState(mcpSandbox!.id))?.running === false, 40_000, 500)).toBe(true);
      const back = await call(mcp, 'terminal', { command: 'pwd; echo "$VIA"' });
      expect(back.text).toMatch(/was hibernated \d+ s ago and resumed for this command: kept files, cwd, exported variables/);
      expect(back.text).toContain('/tmp\nmcp\n');
      expect(back.structured['sandboxResumed']).toMatchObject({ restored: expect.arrayContaining(['cwd']) });
    } finally {
      await mcp.close();
    }
  }, 120_000);
});

describeBwrap('hibernation on bwrap', () => {
  it('an idle persistent sandbox hibernates (its processes end, its dir stays) and resumes with files and shell state; one with a job never does', async () => {
    const install = bwrapInstall('berth-hib-bwrap-', testRange());
    const b = await install.open(HIBERNATING);
    expect((await b.exec({ session: 'daemon' }, LEAVE_DAEMON)).stdout).toBe('no jobs\n');
    expect((await b.exec({ session: 'a' }, SET_UP)).exitCode).toBe(0);
    await b.session({ session: 'busy' }).jobs.start('sleep 120');
    expect(await waitFor(async () => (await b.listWithState('local')).find((s) => s.sandboxKey === 'session:a')?.state === 'hibernated', 40_000, 500)).toBe(true);
    expect((await b.listWithState('local')).find((s) => s.sandboxKey === 'session:busy')?.state).toBe('active');
    expect((await b.listWithState('local')).find((s) => s.sandboxKey === 'session:daemon')?.state).toBe('active');
    const home = (await b.exec({ session: 'busy' }, 'echo ~')).stdout.trim();
    const r = await b.exec({ session: 'a' }, CHECK);
    expectResumedWithState(r, home);
    expect(r.sandboxResumed?.lost).toEqual(expect.arrayContaining(['/dev/shm (tmpfs)']));
  }, 90_000);
});
