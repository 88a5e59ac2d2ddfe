import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import { dockerRequired } from '../helpers/docker.js';
import { describeDocker, docker, dockerConfig, ensureImage, IMAGE, installs } from '../helpers/docker-e2e.js';
import { loopDevicesUnder, mountsUnder } from '../helpers/mounts.js';
import { QuotaEngine, quotaEngineUnavailable } from '../helpers/quota-engine.js';

/*
 * The engine's storage quota on a real engine that has one: a private dockerd on btrfs (see
 * quota-engine.ts), reached by a berth broker through DOCKER_HOST. A write past docker.diskMb into
 * the writable layer fails inside the sandbox at the bound, in the kernel; the engine's disk
 * grows by no more.
 */

const MIB = 1024 * 1024;
const BOUND_MB = 64;
const reg = installs('berth-quota-');
const unavailable = quotaEngineUnavailable();

function suite(): void {
  let engine: QuotaEngine | undefined;
  const savedHost = process.env['DOCKER_HOST'];

  beforeAll(async () => {
    await ensureImage();
    engine = await QuotaEngine.start(docker, IMAGE);
    // This file's worker only (vitest runs each file in its own process): the broker's docker
    // backend reads DOCKER_HOST as berth does.
    process.env['DOCKER_HOST'] = `unix://${engine.socket}`;
  }, 120_000);

  afterAll(async () => {
    if (savedHost === undefined) delete process.env['DOCKER_HOST'];
    else process.env['DOCKER_HOST'] = savedHost;
    await reg.cleanupAll();
    const left = (await engine?.stop()) ?? [];
    expect(left, 'the private engine left these behind').toEqual([]);
  }, 120_000);

  it('a write past docker.diskMb into the writable layer fails at the bound inside the sandbox; the engine\'s disk grows by no more', async () => {
    const t = reg.track();
    const lines: string[] = [];
    const b = await t.open(dockerConfig({ persistent: false, docker: { network: 'none', diskMb: BOUND_MB } }), { log: (_ns, line) => lines.push(line) });
    const s: CallScopeInput = { session: 'quota' };
    expect((await b.exec(s, 'echo up')).stdout).toBe('up\n');
    const [c] = await engine!.docker.listContainers({ filters: { label: [`berth.installation=${t.installation}`] } });
    expect((await engine!.docker.getContainer(c!.Id).inspect()).HostConfig.StorageOpt).toEqual({ size: `${BOUND_MB}M` });
    expect(lines.join('\n')).toMatch(/storage quota=btrfs/);

    const before = engine!.usedBytes();
    const r = await b.exec(s, `mkdir -p /data && dd if=/dev/zero of=/data/big bs=1M count=${BOUND_MB * 4} 2>&1 | grep -o 'Disk quota exceeded' | head -n 1; du -sm /data/big | cut -f1`);
    const [error, mb] = r.stdout.trim().split('\n');
    expect(error, r.output).toBe('Disk quota exceeded');
    expect(Number(mb)).toBeLessThanOrEqual(BOUND_MB);
    expect(engine!.usedBytes() - before).toBeLessThan(BOUND_MB * 2 * MIB);
    // Stopped in the kernel below its bound: the sandbox carries on, and the periodic check stops nothing.
    expect(await b.reapers.enforceDiskLimits()).toEqual([]);
    expect((await b.exec(s, 'rm /data/big; echo again')).stdout).toBe('again\n');
    await b.close();
  });

  it('a persistent sandbox on it has both bounds in the kernel: its writable layer and its own dirs; remove leaves nothing', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ scope: 'session', persistent: true, docker: { network: 'none', diskMb: BOUND_MB } }));
    const s: CallScopeInput = { session: 'both' };
    const fill = (file: string): string => `mkdir -p $(dirname ${file}); dd if=/dev/zero of=${file} bs=1M count=${BOUND_MB * 2} 2>&1 | grep -oE 'Disk quota exceeded|No space left on device' | head -n 1; rm -f ${file}`;
    const r = await b.exec(s, `${fill('/data/big')}; ${fill('/workspace/big')}`);
    expect(r.stdout, r.output).toBe('Disk quota exceeded\nNo space left on device\n');
    expect(await b.removeSandboxOf(s)).toBe(true);
    expect({ mounts: mountsUnder(t.home), loops: loopDevicesUnder(t.home) }).toEqual({ mounts: [], loops: [] });
    await b.close();
  });
}

if (unavailable === undefined) {
  describeDocker('docker: the engine\'s storage quota caps a writable layer (a private dockerd on btrfs)', suite);
} else if (dockerRequired()) {
  describe('docker: the engine\'s storage quota', () => {
    it('needs a private btrfs engine (BERTH_REQUIRE_DOCKER=1)', () => {
      throw new Error(`BERTH_REQUIRE_DOCKER=1 but this host cannot run a private btrfs dockerd: ${unavailable}`);
    });
  });
} else {
  console.warn(`skipping the storage quota suite: ${unavailable}`);
  describe.skip(`docker: the engine's storage quota (skipped: ${unavailable})`, suite);
}
