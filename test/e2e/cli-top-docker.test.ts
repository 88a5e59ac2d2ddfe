import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { BERTH_BIN, runBerth } from '../helpers/cli.js';
import { describeDocker, dockerConfig, dockerConfigYaml, dockerSuiteHooks, installs, type TestInstall } from '../helpers/docker-e2e.js';

/*
 * `berth top` against the real engine: every tenant's sandboxes with what the engine counts for
 * them (a busy one shows CPU use, an idle one little), the latest calls, and in a real
 * terminal a view that fills in from its first frame, redraws in place until Ctrl-C, restores the
 * cursor, and lets no escape sequence from a hostile command reach the operator's screen.
 * The terminal is tmux (a detached server of the test's own): its screen is read as the operator
 * sees it, at 80x24 and resized to 100 and 60 columns.
 */

const reg = installs('berth-top-');
const exec = promisify(execFile);

/** The tmux test; without tmux on the PATH it shows as a skip with the reason (CI installs it). */
const tmuxIt: typeof it = (() => {
  try {
    execFileSync('tmux', ['-V'], { stdio: 'ignore' });
    return it;
  } catch {
    console.warn('skipping the berth top terminal test: tmux is not installed (apt-get install tmux)');
    return ((name: string, ...rest: unknown[]) => (it.skip as (n: string, ...r: unknown[]) => void)(`${name} (skipped: tmux is not installed)`, ...rest)) as typeof it;
  }
})();

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

  tmuxIt('in a real 80x24 terminal (tmux): the first frame at once from the store, then every figure, jobs, all within 24 lines; 100 and 60 columns on resize; Ctrl-C restores the cursor; no escape byte of a command reaches the screen', async () => {
    const t = reg.track();
    await busyAndIdle(t);
    await using tmux = await Tmux.start(t, 80, 24, `${process.execPath} ${BERTH_BIN} top --interval 0.5`);
    // Every figure filled in: CPU of both sandboxes (a second engine sample), then the layout.
    let screen = await tmux.waitFor((s) => /session:busy +running +\d+\.\d/.test(s) && /session:idle +running +\d+\.\d/.test(s));
    let lines = screen.split('\n');
    expect(lines.length).toBeLessThanOrEqual(24);
    expect(lines[0]).toMatch(/^berth top {2}\d\d:\d\d:\d\d UTC {2}2 sandboxes \(2 running\), 2 open sessions/);
    expect(lines).toContain('TENANT     SANDBOX                  STATE        CPU%   MEMORY  PIDS   IDLE SESS');
    expect(screen).toMatch(/\nbeta +session:busy +running +\d+\.\d +[\d.]+ (KiB|MiB) +\d+ +\d+s +1\n/);
    expect(screen).toMatch(/\nacme +session:idle +running +\d+\.\d +[\d.]+ (KiB|MiB) +\d+ +\d+s +1\n/);
    // The running job, under its session, its command cut to the width.
    expect(lines).toContain('JOBS');
    expect(screen).toMatch(/\nbeta +busy +job_[0-9a-f]{16} running +\d+s while :; do :;…\n/);
    expect(lines).toContain('RECENT CALLS');
    expect(Math.max(...lines.map((l) => l.length))).toBeLessThanOrEqual(80);

    await tmux.resize(100, 24);
    screen = await tmux.waitFor((s) => s.includes('PROFILE'));
    lines = screen.split('\n');
    expect(lines.find((l) => /^TENANT .*\bSANDBOX\b/.test(l))).toMatch(/^TENANT +PROFILE +SANDBOX +BACKEND +STATE +CPU% +MEMORY +PIDS +IDLE +SESS$/);
    expect(screen).toMatch(/\nbeta +default +session:busy +docker +running +\d+\.\d/);
    expect(screen).toContain(': \'title?]0;pwned??[2J\'');

    await tmux.resize(60, 24);
    // tmux reflows the old frame at once (its lines wrapped): wait for top's own 60-column header.
    screen = await tmux.waitFor((s) => s.split('\n').some((l) => /^TENANT +SANDBOX +STATE +CPU% +MEMORY$/.test(l)));
    lines = screen.split('\n');
    expect(lines.find((l) => /^TENANT .*\bSANDBOX\b/.test(l))).toMatch(/^TENANT +SANDBOX +STATE +CPU% +MEMORY$/);
    expect(Math.max(...lines.map((l) => l.length))).toBeLessThanOrEqual(60);

    expect(await tmux.interrupt()).toBe(0);
    const out = tmux.output();
    // The first painted frame was drawn before the engines answered: the sandboxes from the store, their figures being read.
    const frames = out.split('\x1b[H').slice(1).filter((f) => !f.startsWith('\x1b[2J'));
    expect(frames[0]).toContain('reading the engines…');
    expect(frames[0]).toMatch(/session:busy +… +… +… +… /);
    expect(frames.length).toBeGreaterThanOrEqual(4);
    // Painted in place: the screen is cleared once, never between frames.
    expect(out.split('\x1b[2J')).toHaveLength(2);
    expect(out.startsWith('\x1b[?25l')).toBe(true);
    expect(out.endsWith('\x1b[?25h')).toBe(true);
    // Besides berth's own home, clear, erase and cursor sequences, not one escape byte reached the terminal.
    // eslint-disable-next-line no-control-regex
    const rest = out.replace(/\x1b\[(H|2J|K|J|\?25l|\?25h)/g, '');
    expect(rest).not.toContain('\x1b');
  }, 120_000);
});

/**
 * A detached tmux server of its own (a socket in the install's dir, no config) with one pane running
 * `command` in the install's dir and environment: the pane's output bytes are kept in a file
 * (pipe-pane, attached before the command starts), the screen read with capture-pane, and the
 * command's exit status written to a file when it ends.
 */
class Tmux {
  private constructor(private readonly socket: string, private readonly log: string, private readonly status: string) {}

  static async start(t: TestInstall, columns: number, rows: number, command: string): Promise<Tmux> {
    // The socket in the install's dir: it goes with it.
    const socket = join(t.dir, '.tmux.sock');
    const go = join(t.dir, '.tmux-go');
    const log = join(t.dir, '.tmux-out');
    const status = join(t.dir, '.tmux-status');
    const tmux = new Tmux(socket, log, status);
    const wrapped = `while [ ! -e ${go} ]; do sleep 0.02; done; ${command}; echo $? > ${status}`;
    await tmux.run(['new-session', '-d', '-s', 'top', '-x', String(columns), '-y', String(rows), '-c', t.dir, wrapped], { ...t.env, TERM: 'xterm-256color' });
    await tmux.run(['set-option', '-w', '-t', 'top', 'remain-on-exit', 'on']);
    await tmux.run(['pipe-pane', '-O', '-t', 'top', `cat > ${log}`]);
    writeFileSync(go, '');
    return tmux;
  }

  /** The visible screen, trailing blank lines left out. */
  async screen(): Promise<string> {
    return (await this.run(['capture-pane', '-p', '-t', 'top'])).replace(/\n+$/, '');
  }

  async waitFor(pred: (screen: string) => boolean, timeoutMs = 60_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = await this.screen();
      if (pred(s)) return s;
      if (Date.now() > deadline) throw new Error(`tmux screen never matched; last:\n${s}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async resize(columns: number, rows: number): Promise<void> {
    await this.run(['resize-window', '-t', 'top', '-x', String(columns), '-y', String(rows)]);
  }

  /** Ctrl-C typed into the pane; the command's exit status once it ended. */
  async interrupt(timeoutMs = 30_000): Promise<number> {
    await this.run(['send-keys', '-t', 'top', 'C-c']);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (existsSync(this.status)) return Number(readFileSync(this.status, 'utf8'));
      if (Date.now() > deadline) throw new Error(`berth top did not end on Ctrl-C; the screen:\n${await this.screen()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Every byte the pane's command wrote. */
  output(): string {
    return readFileSync(this.log, 'utf8');
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.run(['kill-server']).catch(() => undefined);
  }

  private async run(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<string> {
    return (await exec('tmux', ['-S', this.socket, '-f', '/dev/null', ...args], { env })).stdout;
  }
}
