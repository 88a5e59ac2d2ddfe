import { spawn } from 'node:child_process';
import { expect, it } from 'vitest';
import { BERTH_BIN, runBerth } from '../helpers/cli.js';
import { describeDocker, dockerConfig, dockerConfigYaml, dockerSuiteHooks, installs, type TestInstall } from '../helpers/docker-e2e.js';

/*
 * `berth top` against the real engine: every tenant's sandboxes with what the engine counts for
 * them (a busy one shows CPU use, an idle one little), the latest calls, and under a real
 * pseudo-terminal (util-linux `script`) a view that redraws in place until Ctrl-C, restores the
 * cursor, and lets no escape sequence from a hostile command reach the operator's screen.
 */

const reg = installs('berth-top-');

interface TopJson {
  sandboxes: { tenant: string; key: string; state: string; cpuPercent?: number; memoryBytes?: number; processes?: number }[];
  recentCalls: { tenant: string; command: string | null }[];
}

/** Two tenants' sandboxes, one of them busy with a CPU loop as a background job. */
async function busyAndIdle(t: TestInstall): Promise<void> {
  t.writeConfig(dockerConfigYaml({ persistent: false }));
  const broker = await t.open(dockerConfig({ persistent: false }), { holdSessions: false });
  expect((await broker.exec({ tenant: 'acme', session: 'idle' }, 'echo idle')).exitCode).toBe(0);
  await broker.jobs.start({ tenant: 'beta', session: 'busy' }, 'while :; do :; done');
  // A command line that itself carries escape sequences (retitle the window, clear the screen).
  expect((await broker.exec({ tenant: 'beta', session: 'busy' }, ': \'title\x1b]0;pwned\x07\x1b[2J\'')).exitCode).toBe(0);
}

describeDocker('berth top on the real engine', () => {
  dockerSuiteHooks(reg);

  it('--json: every tenant\'s sandboxes with state, memory and processes from the engine; the busy one shows CPU use', async () => {
    const t = reg.track();
    await busyAndIdle(t);
    const r = await runBerth(['top', '--json', '--calls', '5'], { env: t.env, cwd: t.dir, timeoutMs: 60_000 });
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    const view = JSON.parse(r.stdout) as TopJson;
    const byKey = new Map(view.sandboxes.map((s) => [`${s.tenant}/${s.key}`, s]));
    const [idle, busy] = [byKey.get('acme/session:idle'), byKey.get('beta/session:busy')];
    expect(idle?.state).toBe('running');
    expect(busy?.state).toBe('running');
    for (const s of [idle, busy]) {
      expect(s?.memoryBytes).toBeGreaterThan(0);
      expect(s?.processes).toBeGreaterThanOrEqual(1);
    }
    // A loop that never sleeps against a container that waits: whatever the machine's load, more.
    expect(busy?.cpuPercent).toBeGreaterThan(5);
    expect(busy?.cpuPercent).toBeGreaterThan(idle?.cpuPercent ?? Infinity);
    expect(view.recentCalls.map((c) => c.tenant).sort()).toEqual(['acme', 'beta', 'beta']);
  }, 120_000);

  it('on a terminal it redraws in place until Ctrl-C, restores the cursor, and no escape sequence of a command reaches the screen', async () => {
    const t = reg.track();
    await busyAndIdle(t);
    // `script` gives berth a real pseudo-terminal; ^C typed into it is SIGINT from the line discipline.
    const child = spawn('script', ['-qfec', `stty cols 160 rows 40; exec ${process.execPath} ${BERTH_BIN} top --interval 0.5`, '/dev/null'], {
      cwd: t.dir, env: t.env, stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    const closed = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    const deadline = Date.now() + 60_000;
    while ((out.match(/berth top {2}/g) ?? []).length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    child.stdin.write('\x03');
    const code = await closed;
    expect(code).toBe(0);
    const frames = out.split('\x1b[H\x1b[2J');
    expect(frames.length).toBeGreaterThanOrEqual(4);
    expect(out.startsWith('\x1b[?25l')).toBe(true);
    expect(out).toContain('\x1b[?25h');
    const last = frames.at(-2) as string;
    expect(last).toMatch(/\nbeta +default +session:busy +docker +running +\d+\.\d/);
    expect(last).toMatch(/\nacme +default +session:idle +docker +running +\d+\.\d/);
    expect(last).toContain(': \'title?]0;pwned??[2J\'');
    // Besides berth's own clear, hide and show, not one escape byte reached the terminal.
    const rest = out.replaceAll('\x1b[H\x1b[2J', '').replaceAll('\x1b[?25l', '').replaceAll('\x1b[?25h', '');
    expect(rest).not.toContain('\x1b');
  }, 120_000);
});
