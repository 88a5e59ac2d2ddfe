import { randomBytes } from 'node:crypto';
import Dockerode from 'dockerode';
import type { SandboxSpec } from '../../src/backends/backend.js';
import type { DockerSettings } from '../../src/backends/docker/settings.js';
import { buildImage, TEST_IMAGE } from '../../src/backends/docker/image-build.js';
import { parseConfig } from '../../src/setup/parse-config.js';

export { TEST_IMAGE };

/**
 * Whether a docker engine answers on `DOCKER_HOST` / the default socket. Returns the reason when
 * it does not, so a skip can say why. With `BERTH_REQUIRE_DOCKER=1` callers must fail instead.
 */
export async function dockerStatus(docker = new Dockerode()): Promise<{ ok: true } | { ok: false; reason: string }> {
  try {
    await Promise.race([
      docker.ping(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('no answer within 3000 ms')), 3_000).unref()),
    ]);
    return { ok: true };
  } catch (err) {
    const where = process.env['DOCKER_HOST'] ?? 'unix:///var/run/docker.sock';
    return { ok: false, reason: `docker engine not reachable at ${where}: ${(err as Error).message}` };
  }
}

export function dockerRequired(): boolean {
  return process.env['BERTH_REQUIRE_DOCKER'] === '1';
}

/** Build the minimal test image unless it exists (about a second with a warm apt cache). */
export async function ensureTestImage(docker: Dockerode, log: (line: string) => void = () => undefined): Promise<void> {
  await buildImage({ docker, image: TEST_IMAGE, variant: 'minimal', force: false, onProgress: log });
}

/** A fresh installation id per test run, so cleanup can find exactly what this run created. */
export function testInstallation(prefix = 'test'): string {
  return `${prefix}-${randomBytes(6).toString('hex')}`;
}

/** Force-remove every container labelled with `installation`, then its networks; returns what was removed. */
export async function removeInstallationContainers(docker: Dockerode, installation: string): Promise<string[]> {
  const list = await docker.listContainers({ all: true, filters: { label: [`berth.installation=${installation}`] } });
  const removed: string[] = [];
  for (const c of list) {
    try {
      await docker.getContainer(c.Id).remove({ force: true, v: true });
      removed.push(c.Id.slice(0, 12));
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    }
  }
  for (const n of await docker.listNetworks({ filters: { label: [`berth.installation=${installation}`] } })) {
    try {
      await docker.getNetwork(n.Id).remove();
      removed.push(`network ${n.Name}`);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    }
  }
  return removed;
}

/** Docker settings as the schema's defaults give them, for the test image. */
export function dockerSettings(overrides: Partial<DockerSettings> = {}): DockerSettings {
  return { ...parseConfig({ backend: 'docker', docker: { image: TEST_IMAGE } }).base.docker, ...overrides };
}

/**
 * A spec for tests. The digest is random per call unless given, standing in for scope/naming's
 * sha256 of the identity (the backend only needs a unique hex string).
 */
export function testSpec(
  installation: string,
  opts: {
    key?: string;
    ephemeral?: boolean;
    mount?: string | null;
    digest?: string;
    docker?: Partial<DockerSettings>;
    dirName?: string;
  } = {},
): SandboxSpec<DockerSettings> {
  const digest = opts.digest ?? randomBytes(32).toString('hex');
  const key = opts.key ?? `session:${digest.slice(0, 6)}`;
  return {
    identity: { installation, tenant: 'local', profile: 'default', key },
    digest,
    dirName: opts.dirName ?? `sandbox-${digest.slice(0, 12)}`,
    ephemeral: opts.ephemeral ?? false,
    mount: opts.mount ?? null,
    rule: 'auto:5',
    section: dockerSettings(opts.docker),
  };
}
