import { spawn } from 'node:child_process';
import type Dockerode from 'dockerode';
import type { SandboxSpec } from '../backend.js';
import { BerthError } from '../../errors.js';
import { hostBindsOf } from './container-spec.js';
import { bounded, ENGINE_REQUEST_TIMEOUT_MS, fromDockerError } from './engine.js';
import { LIMIT_DEFAULTS } from './limits.js';
import type { DockerSettings } from './settings.js';

/*
 * The periodic check of a sandbox's disk bound (docker.diskMb): the writable layer as the engine
 * sizes it (`SizeRw`), plus berth's own persistent dirs of the sandbox. Never the user's attached
 * workspace or the operator's volumes: they are not the sandbox's to account. The kernel caps each
 * part on its own where the host can (disk-bound.ts); this check bounds their sum, and is all
 * there is for a part nothing else caps (overlay2 on extfs, a non-root berth): there a sandbox can
 * overshoot the bound by what it writes until the next check.
 */

export const MIB = 1024 * 1024;

const DU_TIMEOUT_MS = 60_000;

export interface DiskUsage {
  /** The container's writable layer (the engine's `SizeRw`: apparent sizes). */
  layerBytes: number;
  /** berth's own dirs of the sandbox on the host (allocated blocks). */
  ownDirBytes: number;
}

function totalBytes(u: DiskUsage): number {
  return u.layerBytes + u.ownDirBytes;
}

/** What one sandbox uses on the host's disk. */
export async function measureDisk(docker: Dockerode, ref: string, ownDirs: readonly string[]): Promise<DiskUsage> {
  let info: Dockerode.ContainerInspectInfo & { SizeRw?: number };
  try {
    // `size` is a query parameter of GET /containers/{id}/json the client's types do not list.
    info = await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, `measure container ${ref.slice(0, 12)}`,
      (abortSignal) => docker.getContainer(ref).inspect({ size: true, abortSignal } as Dockerode.ContainerInspectOptions));
  } catch (err) {
    throw fromDockerError(docker, err, `measure the disk use of container ${ref.slice(0, 12)}`);
  }
  let ownDirBytes = 0;
  for (const dir of ownDirs) ownDirBytes += await duBytes(dir);
  return { layerBytes: typeof info.SizeRw === 'number' ? info.SizeRw : 0, ownDirBytes };
}

/**
 * Allocated bytes under `dir` by the host's `du`, which walks fd-relative without following
 * symlinks (a link the sandbox plants, or swaps in mid-walk, never leads it elsewhere), stays on
 * one file system and counts hard links once. A missing dir is 0.
 */
export function duBytes(dir: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn('du', ['-skx', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), DU_TIMEOUT_MS);
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-500)));
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(new BerthError('disk_measure_failed', `could not run du to measure ${dir}: ${e.message}`, { cause: e }));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      const kib = /^(\d+)\s/.exec(out);
      // du exits 1 when part of the tree vanished or was unreadable; its total still counts the rest.
      if (kib) resolve(Number(kib[1]) * 1024);
      else if (/No such file or directory/.test(err)) resolve(0);
      else reject(new BerthError('disk_measure_failed', `du could not measure ${dir} (${signal ?? `exit ${code}`}): ${err.trim()}`));
    });
  });
}

/**
 * The error of a sandbox over its bound (docker.diskMb, else the default), or undefined. Counts the
 * writable layer and berth's own dirs of it (`hostDir`: a persistent sandbox's bind root).
 */
export async function diskBreachOf(docker: Dockerode, spec: SandboxSpec<DockerSettings>, ref: string, hostDir: string | undefined): Promise<BerthError | undefined> {
  const limitMb = spec.section.diskMb ?? LIMIT_DEFAULTS.diskMb;
  const ownDirs = hostBindsOf(spec, hostDir).filter((b) => b.kind === 'own').map((b) => b.source);
  const usage = await measureDisk(docker, ref, ownDirs);
  return totalBytes(usage) > limitMb * MIB ? diskLimitError(spec, ref, usage, limitMb, ownDirs) : undefined;
}

/** The error a sandbox over its disk bound answers with (stopped, and not started again). */
export function diskLimitError(spec: SandboxSpec<DockerSettings>, ref: string, usage: DiskUsage, limitMb: number, ownDirs: readonly string[]): BerthError {
  const mib = (n: number): string => `${Math.round(n / MIB)} MiB`;
  const parts = [`writable layer ${mib(usage.layerBytes)}`];
  if (ownDirs.length > 0) parts.push(`its dirs under BERTH_HOME ${mib(usage.ownDirBytes)}`);
  const clean = ownDirs.length > 0 ? `, delete files under ${ownDirs.join(' and ')} on the host,` : '';
  return new BerthError(
    'disk_limit_exceeded',
    `sandbox "${spec.identity.key}" (container ${ref.slice(0, 12)}) uses ${mib(totalBytes(usage))} of disk (${parts.join(', ')}), ` +
      `over its limit of ${limitMb} MiB (docker.diskMb), so it was stopped. Remove it with berth rm (same scope flags; its files go ` +
      `with it) and start again${clean} or raise docker.diskMb in the config`,
  );
}
