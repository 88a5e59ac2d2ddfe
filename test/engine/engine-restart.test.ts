import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Dockerode from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { removeInstallationContainers } from '../helpers/docker.js';
import { unmountAllUnder } from '../helpers/mounts.js';

/*
 * Restarts the Docker engine under a live broker. It stops the engine every other suite uses, so it
 * is not part of `npm test`: `npm run test:engine-restart` runs it alone (CI does, after npm test).
 */

const IMAGE = process.env['BERTH_TEST_IMAGE'] ?? 'berth-sandbox:minimal';
const SOCKET = '/var/run/docker.sock';
const docker = new Dockerode({ socketPath: SOCKET });

function dockerdPid(): number | undefined {
  try {
    return Number(execFileSync('pidof', ['dockerd'], { encoding: 'utf8' }).trim().split(/\s+/)[0]);
  } catch {
    return undefined;
  }
}

async function until(check: () => Promise<boolean> | boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function restartEngine(): Promise<void> {
  const pid = dockerdPid();
  if (pid === undefined) throw new Error('no dockerd process to restart (this test restarts a dockerd it can see)');
  process.kill(pid, 'SIGTERM');
  await until(() => dockerdPid() === undefined, 60_000, `dockerd ${pid} to exit`);
  const child = spawn('dockerd', [], { detached: true, stdio: 'ignore' });
  child.unref();
  await until(async () => existsSync(SOCKET) && (await docker.ping().then(() => true, () => false)), 60_000, 'dockerd to answer again');
}

const roots: string[] = [];
afterAll(async () => {
  for (const r of roots) {
    unmountAllUnder(r);
    rmSync(r, { recursive: true, force: true });
  }
});

describe('an engine restart under a running broker', () => {
  it('is survived: the next call reconnects, restarts the persistent container with its files, and an ephemeral session carries on', async () => {
    const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-engine-')));
    roots.push(home);
    const broker = await Broker.open({
      config: parseConfig({ backend: 'docker', persistent: false, docker: { image: IMAGE }, exec: { timeoutSeconds: 20 } }),
      berthHome: home, env: { PATH: process.env['PATH'] },
    });
    try {
      const before = await broker.exec({}, 'echo kept > /workspace/file; cd /tmp; hostname');
      expect(before.exitCode).toBe(0);
      const eph = await broker.exec({ session: 'e' }, 'echo eph > /workspace/x; hostname');
      expect(eph.exitCode).toBe(0);

      await restartEngine();

      const after = await broker.exec({}, 'cat /workspace/file; hostname');
      expect(after.exitCode, after.output).toBe(0);
      expect(after.stdout).toBe(`kept\n${before.stdout.trim().split('\n').pop()}\n`);
      const again = await broker.exec({ session: 'e' }, 'hostname');
      expect(again.exitCode, again.output).toBe(0);
      expect(again.stdout).toBe(eph.stdout.split('\n').slice(-2).join('\n'));
    } finally {
      await broker.close();
      await removeInstallationContainers(docker, broker.installationId);
    }
  }, 180_000);
});
