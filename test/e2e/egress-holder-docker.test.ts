import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { beforeAll, expect, it, vi } from 'vitest';
import { BerthError } from '../../src/errors.js';
import { REPO, runBerth } from '../helpers/cli.js';
import { containerState, describeDocker, docker, dockerConfig, dockerConfigYaml, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';

/*
 * A sandbox's egress listener (the proxy's port inside its network namespace) is one process's at
 * a time, and several berth processes of one installation serve the same sandboxes (a `berth
 * serve` and CLI calls): the state store says which holds it (docs/design.md, egress). Another
 * process with the same egress context uses that listener; another context is a configuration
 * error naming the fix; a holder that died or closed is taken over. Real docker, the proxy's own
 * 403 for a name the allowlist does not have as the probe (no upstream needed): 403 means a
 * listener answered in the sandbox, 000 that none did.
 */

const DEBIAN_IMAGE = 'berth-sandbox:latest';
const reg = installs('berth-egress-holder-');
const S = { session: 's' };
const PROBE = 'curl -s -o /dev/null -w "%{http_code}" --max-time 5 http://not-allowed.example/ ; echo';

const settings = (allow: string[] = ['api.example.test']) => ({
  persistent: true, scope: 'session', docker: { image: DEBIAN_IMAGE }, egress: { mode: 'allowlist', allow },
});
const config = (allow?: string[]) => dockerConfig(settings(allow));

/** A berth library process (compiled dist/) that serves session `s`'s sandbox, then waits to be killed. */
const HOLDER = `
import { Broker, parseConfig } from ${JSON.stringify(pathToFileURL(join(REPO, 'dist', 'index.js')).href)};
const [berthHome, raw] = process.argv.slice(2);
const broker = await Broker.open({ config: parseConfig(JSON.parse(raw)), berthHome, env: { PATH: process.env.PATH } });
const r = await broker.exec({ session: 's' }, ${JSON.stringify(PROBE)});
process.stdout.write('ready ' + r.stdout);
setInterval(() => {}, 1000);
`;

/** The keeper processes (`berth __keep`) of the installation at `home`, from the host's /proc. */
function keepersOf(home: string): number[] {
  const found: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmdline = readFileSync(`/proc/${d}/cmdline`, 'latin1').split('\0');
      if (cmdline.includes('__keep') && readFileSync(`/proc/${d}/environ`, 'latin1').split('\0').includes(`BERTH_HOME=${home}`)) found.push(Number(d));
    } catch {
      // ended meanwhile
    }
  }
  return found;
}

/** The pid of the process the store says holds sandbox `ref`'s egress listener, or undefined. */
function listenerHolder(home: string, ref: string): string | undefined {
  const db = new Database(join(home, 'state.db'), { readonly: true });
  try {
    const row = db.prepare('SELECT holder FROM egress_listeners WHERE ref = ?').get(ref) as { holder: string } | undefined;
    return row?.holder.split(':')[0];
  } finally {
    db.close();
  }
}

/** A file in a container, or '' while it is not there. */
function fileIn(container: string, path: string): string {
  try {
    return execFileSync('docker', ['exec', container, 'cat', path], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
}

describeDocker('egress listeners across berth processes of one installation (docker)', () => {
  dockerSuiteHooks(reg);
  beforeAll(async () => {
    const images = await docker.listImages({ filters: { reference: [DEBIAN_IMAGE] } });
    if (images.length === 0) throw new Error(`image ${DEBIAN_IMAGE} is missing; build it with: node bin/berth.js image build --variant debian`);
  });

  it('a second process with the same config uses the first one\'s listener, and takes it over when the first closes', async () => {
    const t = reg.track();
    const server = await t.open(config());
    expect((await server.exec(S, PROBE)).stdout).toBe('403\n');
    const cli = await t.open(config());
    // Before: "port 3128 on 127.0.0.1 is taken inside network namespace ..." (listen_failed).
    const r = await cli.exec(S, PROBE);
    expect(r.exitCode, r.output).toBe(0);
    expect(r.stdout).toBe('403\n');
    await server.close();
    // The first one's listener is gone with it; the second listens in its place within a second or so.
    await vi.waitFor(async () => expect((await cli.exec(S, PROBE)).stdout).toBe('403\n'), { timeout: 15_000, interval: 500 });
  }, 120_000);

  it('a second process with another egress policy is refused, naming the holder and the fix, and the first one\'s listener is untouched', async () => {
    const t = reg.track();
    const server = await t.open(config());
    expect((await server.exec(S, PROBE)).stdout).toBe('403\n');
    const other = await t.open(config(['api.example.test', 'more.example.test']));
    const err = await other.exec(S, PROBE).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('config_invalid');
    expect((err as Error).message).toMatch(/egress proxy is served by another berth process of this installation \(pid \d+\) with another egress policy/);
    expect((err as Error).message).toContain('run this call with the config and environment of that process');
    expect((await server.exec(S, PROBE)).stdout).toBe('403\n');
  }, 120_000);

  it('a process that serves a sandbox\'s proxy says as it closes that a background job still running there loses its network, and it does', async () => {
    const t = reg.track();
    const quiet: string[] = [];
    const first = await t.open(config(), { log: (ns, m) => void quiet.push(`${ns}: ${m}`) });
    expect((await first.exec(S, PROBE)).stdout).toBe('403\n');
    await first.close();
    expect(quiet.filter((l) => l.includes('background job'))).toEqual([]);

    const lines: string[] = [];
    const cli = await t.open(config(), { log: (ns, m) => void lines.push(`${ns}: ${m}`) });
    expect((await cli.exec(S, `(sleep 4; curl -sS -o /dev/null -w "%{http_code}" --max-time 5 http://not-allowed.example/ > /tmp/late 2>&1; echo " $?" >> /tmp/late) > /dev/null 2>&1 &`)).exitCode).toBe(0);
    const [c] = await t.containers();
    await cli.close();
    expect(lines.join('\n')).toMatch(/berth:egress: sandbox session:s: a background job started in it may still run, and its egress proxy lived in this berth process, which ends now: such a job has no network from here on/);
    // True: the job's request, once the process closed, finds no proxy listening (curl's exit 7) where it answered 403.
    const late = (): string => execFileSync('docker', ['exec', c!.id, 'cat', '/tmp/late'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    await vi.waitFor(() => expect(late()).toMatch(/Failed to connect to 127\.0\.0\.1 port \d+[\s\S]* 7\n$/), { timeout: 30_000, interval: 500 });
  }, 120_000);

  it('a holder process that was killed (SIGKILL) is taken over by the next process', async () => {
    const t = reg.track();
    const script = join(t.root, 'holder.mjs');
    writeFileSync(script, HOLDER);
    const raw = JSON.parse(dockerConfigYaml(settings())) as Record<string, unknown>;
    const child = spawn(process.execPath, [script, t.home, JSON.stringify(raw)], { env: t.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    let out = '';
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`holder not ready within 60 s; stdout ${out} stderr ${err}`)), 60_000);
        child.stdout.setEncoding('utf8').on('data', (d: string) => {
          out += d;
          if (/ready \d+\n/.test(out)) {
            clearTimeout(timer);
            resolve();
          }
        });
        child.once('exit', (code) => reject(new Error(`holder exited with ${code} before ready: ${err}`)));
      });
    } finally {
      child.kill('SIGKILL');
      await exited;
    }
    expect(out).toBe('ready 403\n');
    // Its row still names it; it is dead, so this process takes the listener.
    const next = await t.open(config());
    expect((await next.exec(S, PROBE)).stdout).toBe('403\n');
  }, 120_000);

  it('a CLI call that leaves a background job hands its proxy to a keeper: the job reaches the proxy after the call ended, and the keeper ends with the job', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(settings()));
    // The job's request waits for a file the test writes once the call has ended.
    const job = `(while [ ! -f /tmp/go ]; do sleep 0.2; done; curl -sS -o /dev/null -w "%{http_code}" --max-time 5 http://not-allowed.example/ > /tmp/late 2>&1; echo " $?" >> /tmp/late) > /dev/null 2>&1 & echo started`;
    const r = await runBerth(['exec', '--session', 's', '--', job], { env: t.env, cwd: t.dir, timeoutMs: 90_000 });
    expect(r, r.stderr).toMatchObject({ code: 0, stdout: 'started\n', stderr: '' });
    // The call has ended; its keeper holds the sandbox (before: "... such a job has no network from here on").
    const keepers = keepersOf(t.home);
    expect(keepers).toHaveLength(1);
    const [c] = await t.containers();
    // The keeper listens in the sandbox once it took the listener over (the store names it); a
    // request made before that, in the moment after the call ended, finds no proxy (docs/design.md).
    await vi.waitFor(() => expect(listenerHolder(t.home, c!.id)).toBe(String(keepers[0])), { timeout: 10_000, interval: 100 });
    execFileSync('docker', ['exec', c!.id, 'touch', '/tmp/go']);
    // The job's request, made after the call ended, is answered by the proxy (403 for a name not allowed; curl's 7 had no proxy).
    await vi.waitFor(() => expect(fileIn(c!.id, '/tmp/late')).toBe('403 0\n'), { timeout: 30_000, interval: 500 });
    // No job is left: the keeper lets the sandbox go as it is and ends.
    await vi.waitFor(() => expect(keepersOf(t.home)).toEqual([]), { timeout: 20_000, interval: 500 });
    expect((await containerState(c!.id))?.running).toBe(true);
    expect((await runBerth(['exec', '--session', 's', '--', 'echo again'], { env: t.env, cwd: t.dir, timeoutMs: 60_000 })).stdout).toBe('again\n');
  }, 180_000);

  it('the call passes its listening socket to the keeper: a job asking all along never finds the port closed, and the keeper holds the listener as the call ends', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(settings()));
    // Asks every ~50 ms from before the call ends until the test says stop (at most 120 s): each
    // line is the time (ms), the answer's code and curl's exit. Exit 7 (connection refused) is a
    // moment with no listener: what a keeper listening anew after the call ended left (~0.3 s, 3 asks, measured).
    const loop = 'end=$(( $(date +%s%3N) + 120000 )); while [ ! -f /tmp/stop ] && [ "$(date +%s%3N)" -lt "$end" ]; do ' +
      'echo "$(date +%s%3N) $(curl -s -o /dev/null -w "%{http_code} %{exitcode}" --max-time 5 http://not-allowed.example/)" >> /tmp/asks; sleep 0.05; done; echo done >> /tmp/asks';
    const r = await runBerth(['exec', '--session', 's', '--', `(${loop}) > /dev/null 2>&1 & echo started`], { env: t.env, cwd: t.dir, timeoutMs: 90_000 });
    const callEnded = Date.now();
    expect(r, r.stderr).toMatchObject({ code: 0, stdout: 'started\n', stderr: '' });
    const keepers = keepersOf(t.home);
    expect(keepers).toHaveLength(1);
    const [c] = await t.containers();
    // The keeper took the store's row as it served the passed socket, before the call ended.
    expect(listenerHolder(t.home, c!.id)).toBe(String(keepers[0]));
    const after = (): number => fileIn(c!.id, '/tmp/asks').trim().split('\n').filter((l) => Number(l.split(' ')[0]) > callEnded + 1000).length;
    await vi.waitFor(() => expect(after()).toBeGreaterThan(5), { timeout: 60_000, interval: 500 });
    execFileSync('docker', ['exec', c!.id, 'touch', '/tmp/stop']);
    await vi.waitFor(() => expect(fileIn(c!.id, '/tmp/asks')).toMatch(/\ndone\n$/), { timeout: 30_000, interval: 500 });
    const asks = fileIn(c!.id, '/tmp/asks').trim().split('\n').slice(0, -1).map((l) => l.split(' '));
    // Asked before the call ended and after: the loop spanned the hand-over.
    expect(asks.filter(([at]) => Number(at) < callEnded - 200).length).toBeGreaterThan(0);
    expect(asks.filter(([at]) => Number(at) > callEnded + 1000).length).toBeGreaterThan(5);
    expect(asks.filter(([, , exit]) => exit === '7')).toEqual([]);
    // A request in flight through the call's process as it ended may end with it (reset); every other is the proxy's 403.
    expect(asks.filter(([, code]) => code === '403').length).toBeGreaterThanOrEqual(asks.length - 2);
  }, 180_000);

  it('a keeper ends when its sandbox is removed (berth rm), however long the job would have run', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml(settings()));
    const r = await runBerth(['exec', '--session', 's', '--', 'sleep 600 > /dev/null 2>&1 & echo started'], { env: t.env, cwd: t.dir, timeoutMs: 90_000 });
    expect(r, r.stderr).toMatchObject({ code: 0, stdout: 'started\n' });
    expect(keepersOf(t.home)).toHaveLength(1);
    expect((await runBerth(['rm', '--session', 's'], { env: t.env, cwd: t.dir, timeoutMs: 60_000 })).code).toBe(0);
    expect(await t.containers()).toEqual([]);
    await vi.waitFor(() => expect(keepersOf(t.home)).toEqual([]), { timeout: 20_000, interval: 500 });
  }, 180_000);
});
