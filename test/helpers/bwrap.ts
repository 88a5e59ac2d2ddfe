import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, onTestFinished } from 'vitest';
import { placeSandbox, removeSandbox, type SandboxPlacement } from '../../src/backends/bwrap/placement.js';
import { probeBwrap, type BwrapHost } from '../../src/backends/bwrap/probe.js';
import { startSandbox, type BwrapSandbox, type StartSandboxOptions } from '../../src/backends/bwrap/sandbox.js';
import type { SandboxProcess } from '../../src/backends/bwrap/spawn.js';
import { prepareRoot } from '../../src/backends/bwrap/sandbox-dirs.js';
import { seccompProgram } from '../../src/backends/bwrap/seccomp.js';
import type { UidRange } from '../../src/backends/bwrap/uid-claims.js';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';

/*
 * Plumbing for the bwrap suites: a throwaway sandbox root per test, a uid range per test file
 * (so parallel files never share a uid), and a visible skip (or a failure under
 * BERTH_REQUIRE_BWRAP=1) when this host cannot make a bwrap sandbox.
 */

export const IS_ROOT = process.getuid?.() === 0;

/** A uid range of its own for each test file: 1000 uids at a random offset in 1.5e9..1.6e9. */
export function testRange(): UidRange {
  return { first: 1_500_000_000 + Math.floor(Math.random() * 99_000) * 1000, count: 1000 };
}

/** A fresh sandbox root (0711 under a private temp dir), removed when the test finishes. */
export function tempRoot(): string {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bwrap-')));
  chmodSync(dir, 0o711);
  const root = join(dir, 'root');
  prepareRoot(root);
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return root;
}

/** A BERTH_HOME and a sandbox root for brokers on bwrap; both go, with every broker opened, when the test finishes. */
export interface BwrapInstall {
  home: string;
  root: string;
  /**
   * A broker with `backend: bwrap` on this root and `range`, ephemeral sandboxes, 16 MiB tmpfs;
   * `extra` adds config (its `bwrap` keys merge into the bwrap section); `warmPool` lets it fill pools.
   */
  open(extra?: Record<string, unknown>, opts?: { warmPool?: boolean; env?: Record<string, string | undefined> }): Promise<Broker>;
}

export function bwrapInstall(prefix: string, range: UidRange): BwrapInstall {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), prefix)));
  chmodSync(dir, 0o711);
  const home = join(dir, 'home');
  mkdirSync(home, { mode: 0o700 });
  const root = join(dir, 'root');
  const brokers: Broker[] = [];
  onTestFinished(async () => {
    for (const b of brokers) await b.close({ graceMs: 1_000 }).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    home,
    root,
    open: async (extra = {}, opts = {}) => {
      const { bwrap: more, ...rest } = extra as { bwrap?: Record<string, unknown> };
      const config = parseConfig(
        { backend: 'bwrap', persistent: false, bwrap: { root, uids: range, tmpSizeMb: 16, ...more }, ...rest },
        undefined,
        { backends: BUILTIN_BACKENDS },
      );
      const broker = await Broker.open({
        config, berthHome: home, env: { PATH: process.env['PATH'], ...opts.env }, ...(opts.warmPool === true ? { warmPool: true } : {}),
      });
      brokers.push(broker);
      return broker;
    },
  };
}

async function status(): Promise<{ ok: true; host: BwrapHost } | { ok: false; reason: string }> {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bwrap-probe-')));
  chmodSync(dir, 0o711);
  try {
    const root = join(dir, 'root');
    prepareRoot(root);
    const user = IS_ROOT ? { uid: testRange().first, gid: testRange().first } : undefined;
    return { ok: true, host: await probeBwrap({ root, user, seccomp: seccompProgram() }) };
  } catch (err) {
    return { ok: false, reason: err instanceof Error ? err.message : String(err) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export const bwrap = await status();

/** `describe` for a suite that needs bwrap sandboxes: a visible skip with the reason, or a failure under BERTH_REQUIRE_BWRAP=1. */
export function describeBwrap(name: string, body: (host: BwrapHost) => void): void {
  const b = bwrap;
  if (b.ok) {
    describe(name, () => body(b.host));
    return;
  }
  if (process.env['BERTH_REQUIRE_BWRAP'] === '1') {
    describe(name, () => {
      it('needs bubblewrap sandboxes (BERTH_REQUIRE_BWRAP=1)', () => {
        throw new Error(`BERTH_REQUIRE_BWRAP=1 but ${b.reason}`);
      });
    });
    return;
  }
  console.warn(`skipping ${name}: ${b.reason}`);
  describe.skip(`${name} (skipped: ${b.reason})`, () => body(undefined as never));
}

export interface TestSandbox {
  sb: BwrapSandbox;
  placement: SandboxPlacement;
}

/**
 * Places and starts sandbox `name` under `root`; stopped and removed when the test finishes
 * (on failure its host pid is printed).
 */
export async function testSandbox(
  host: BwrapHost,
  root: string,
  range: UidRange,
  name: string,
  over: Partial<StartSandboxOptions> & { attached?: string } = {},
): Promise<TestSandbox> {
  const { attached, ...startOver } = over;
  const placement = placeSandbox({ root, name, range, attached });
  const sb = await startSandbox({
    ...host,
    dirs: placement.dirs,
    user: placement.user,
    workspace: placement.workspace,
    network: 'none',
    seccomp: seccompProgram(),
    hostname: 'berth-test',
    tmpSizeBytes: 16 << 20,
    maxProcesses: 256,
    ...startOver,
  });
  onTestFinished(async (ctx) => {
    if (ctx.task.result?.state === 'fail') console.error(`bwrap sandbox ${name}: host pid ${sb.hostPid}, dir ${placement.dirs.root}`);
    await sb.stop();
    removeSandbox(root, placement.dirs);
  });
  return { sb, placement };
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Collects a process's output and exit status. */
export async function collect(p: SandboxProcess): Promise<RunResult> {
  let stdout = '';
  let stderr = '';
  p.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  p.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const closed = (s: NodeJS.ReadableStream) => new Promise((r) => s.once('close', r));
  const [code] = await Promise.all([p.exited, closed(p.stdout), closed(p.stderr)]);
  return { code, stdout, stderr };
}

export const PATH_ENV = { PATH: '/usr/local/bin:/usr/bin:/bin' };

/** Runs one bash line in the sandbox (stdin closed). */
export async function sh(sb: BwrapSandbox, line: string, env: Record<string, string> = PATH_ENV, stdin = ''): Promise<RunResult> {
  const p = await sb.spawn(['/bin/bash', '--noprofile', '--norc', '-c', line], { env, cwd: '/workspace', stdin: true });
  p.stdin?.end(stdin);
  return collect(p);
}

/** Host pids whose pid namespace is `nsInode` (the processes of one sandbox, seen from the host). */
export function hostPidsInPidNs(nsInode: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readlinkSync(`/proc/${name}/ns/pid`) === nsInode) out.push(Number(name));
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return out;
}

/** `pid:[N]` of a host process. */
export function pidNsOf(hostPid: number): string {
  return readlinkSync(`/proc/${hostPid}/ns/pid`);
}

/** The `Uid:` line's real uid of a host process. */
export function hostUidOf(hostPid: number): number {
  const m = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${hostPid}/status`, 'utf8'));
  return Number(m?.[1]);
}
