import { chownSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Dockerode from 'dockerode';
import { afterAll, afterEach, beforeAll, describe, it } from 'vitest';
import { Broker, type BrokerOptions } from '../../src/broker/broker.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import type { BerthConfig } from '../../src/setup/berth-config.js';
import { dockerRequired, dockerStatus, ensureTestImage, TEST_IMAGE } from './docker.js';
import { unmountAllUnder } from './mounts.js';

/*
 * Shared plumbing for the broker/CLI/reaper suites against the real engine: one temp
 * BERTH_HOME per test (its own installation id), cleanup by the `berth.installation` label,
 * and a visible skip (or a failure under BERTH_REQUIRE_DOCKER=1) when no engine answers.
 */

export const IMAGE = process.env['BERTH_TEST_IMAGE'] ?? TEST_IMAGE;
export const docker = new Dockerode();
export const engine = await dockerStatus(docker);

/**
 * `describe` for a docker suite: runs when the engine answers; otherwise a visible skip carrying
 * the reason, or, under BERTH_REQUIRE_DOCKER=1, a failing test.
 */
export function describeDocker(name: string, body: () => void): void {
  if (engine.ok) {
    describe(name, body);
    return;
  }
  if (dockerRequired()) {
    describe(name, () => {
      it('needs a reachable engine (BERTH_REQUIRE_DOCKER=1)', () => {
        throw new Error(`BERTH_REQUIRE_DOCKER=1 but ${engine.reason}`);
      });
    });
    return;
  }
  console.warn(`skipping ${name}: ${engine.reason}`);
  describe.skip(`${name} (skipped: ${engine.reason})`, body);
}

/** Make sure the image the configs name exists (builds the minimal test image if missing). */
export async function ensureImage(): Promise<void> {
  if (IMAGE === TEST_IMAGE) {
    await ensureTestImage(docker);
    return;
  }
  await docker.getImage(IMAGE).inspect();
}

/** The owner of `userDir` dirs: the first user of a Debian host. */
export const PROJECT_UID = 1000;

/** Per-command timeout in test configs, so a hung command ends well inside a test's own timeout. */
const EXEC_TIMEOUT_SECONDS = 20;

/**
 * A tenant's disk bounds may add up to the size of BERTH_HOME's filesystem by default, which
 * differs from machine to machine (10 GiB a sandbox: a small disk would refuse a test's third
 * sandbox). Tests that are not about that bound lift it; those that are set their own.
 */
const TEST_DISK_LIMIT_MB = 100_000_000;

function rawDockerConfig(extra: Record<string, unknown>): Record<string, unknown> {
  const { docker: dockerExtra, exec: execExtra, limits: limitsExtra, ...rest } = extra as { docker?: object; exec?: object; limits?: object };
  return {
    backend: 'docker',
    ...rest,
    limits: { diskMb: TEST_DISK_LIMIT_MB, ...limitsExtra },
    exec: { timeoutSeconds: EXEC_TIMEOUT_SECONDS, ...execExtra },
    docker: { image: IMAGE, ...dockerExtra },
  };
}

/** A validated docker config using the test image; `extra` is merged over it (docker and exec sections too). */
export function dockerConfig(extra: Record<string, unknown> = {}): BerthConfig {
  return parseConfig(rawDockerConfig(extra));
}

/** The same, as YAML for a `berth.yaml` (JSON is valid YAML). */
export function dockerConfigYaml(extra: Record<string, unknown> = {}): string {
  return `${JSON.stringify(rawDockerConfig(extra), null, 2)}\n`;
}

export interface ContainerSummary {
  id: string;
  name: string;
  state: string;
  labels: Record<string, string>;
}

/** Every container (running or not) labelled with this installation. */
export async function containersOf(installation: string): Promise<ContainerSummary[]> {
  const list = await docker.listContainers({ all: true, filters: { label: [`berth.installation=${installation}`] } });
  return list.map((c) => ({
    id: c.Id,
    name: (c.Names[0] ?? '').replace(/^\//, ''),
    state: c.State,
    labels: c.Labels,
  }));
}

export interface NetworkSummary {
  id: string;
  name: string;
  labels: Record<string, string>;
  options: Record<string, string>;
}

/** Every network labelled with this installation. */
export async function networksOf(installation: string): Promise<NetworkSummary[]> {
  const list = await docker.listNetworks({ filters: { label: [`berth.installation=${installation}`] } });
  return list.map((n) => ({ id: n.Id, name: n.Name, labels: n.Labels ?? {}, options: n.Options ?? {} }));
}

/** Every image labelled with this installation (snapshots), tagged or not. */
export async function imagesOf(installation: string): Promise<string[]> {
  const list = await docker.listImages({ all: true, filters: JSON.stringify({ label: [`berth.installation=${installation}`] }) });
  return list.map((i) => i.Id);
}

/** Remove every image of an installation (after its containers); returns the ids removed. */
export async function removeImagesOf(installation: string): Promise<string[]> {
  const ids = await imagesOf(installation);
  for (const id of ids) await docker.getImage(id).remove({ force: true }).catch(() => undefined);
  return ids;
}

/** Remove every network of an installation (after its containers); returns the names removed. */
export async function removeNetworksOf(installation: string): Promise<string[]> {
  const removed: string[] = [];
  for (const n of await networksOf(installation)) {
    try {
      await docker.getNetwork(n.id).remove();
      removed.push(`network ${n.name}`);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    }
  }
  return removed;
}

/** `id (name, key, state)` lines for failure messages. */
export function describeContainers(list: ContainerSummary[]): string {
  if (list.length === 0) return '(no containers)';
  return list.map((c) => `${c.id.slice(0, 12)} ${c.name} key=${c.labels['berth.key'] ?? '?'} ${c.state}`).join('; ');
}

/** Inspect state of one container, or undefined when it is gone. */
export async function containerState(ref: string): Promise<{ running: boolean; status: string } | undefined> {
  try {
    const info = await docker.getContainer(ref).inspect();
    return { running: info.State.Running, status: info.State.Status };
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return undefined;
    throw err;
  }
}

/** The single container of this installation whose `berth.key` label is `key`. */
export async function containerFor(installation: string, key: string): Promise<ContainerSummary> {
  const all = await containersOf(installation);
  const found = all.filter((c) => c.labels['berth.key'] === key);
  if (found.length !== 1) {
    throw new Error(`expected one container for key "${key}" of installation ${installation}, found: ${describeContainers(all)}`);
  }
  return found[0]!;
}

/** Force-remove every container of an installation; returns `id name` of each removed. */
export async function removeContainersOf(installation: string): Promise<string[]> {
  const removed: string[] = [];
  for (const c of await containersOf(installation)) {
    try {
      await docker.getContainer(c.id).remove({ force: true, v: true });
      removed.push(`${c.id.slice(0, 12)} ${c.name}`);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    }
  }
  return removed;
}

/** Poll `check` until it returns true or `timeoutMs` passes; returns the last answer. */
export async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs: number, everyMs = 200): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * One test's installation: a private BERTH_HOME (so its own installation id), a work dir with
 * room for configs, and the brokers opened on it. `cleanup()` closes the brokers, removes every
 * container labelled with the installation and deletes the dirs; it returns what it had to remove.
 */
export class TestInstall {
  readonly root: string;
  readonly home: string;
  readonly dir: string;
  readonly installation: string;
  private readonly brokers: Broker[] = [];

  constructor(prefix = 'berth-docker-') {
    this.root = realpathSync(mkdtempSync(join(tmpdir(), prefix)));
    this.home = join(this.root, 'berth-home');
    this.dir = join(this.root, 'work');
    mkdirSync(this.dir, { recursive: true });
    // Create the store up front so the installation id (the cleanup label) is known before any call.
    const store = StateStore.open(this.home);
    this.installation = store.installationId;
    store.close();
  }

  /** Env for a spawned CLI: this BERTH_HOME, the engine, nothing else from the host. */
  get env(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { PATH: process.env['PATH'], HOME: process.env['HOME'], BERTH_HOME: this.home };
    if (process.env['BERTH_DEBUG']) env['BERTH_DEBUG'] = process.env['BERTH_DEBUG'];
    if (process.env['DOCKER_HOST']) env['DOCKER_HOST'] = process.env['DOCKER_HOST'];
    return env;
  }

  /** Writes `berth.yaml` into the work dir (or `dir`). */
  writeConfig(yaml: string, dir = this.dir): void {
    writeFileSync(join(dir, 'berth.yaml'), yaml);
  }

  /** A new dir under this test's root. */
  mkdir(...parts: string[]): string {
    const p = join(this.root, ...parts);
    mkdirSync(p, { recursive: true });
    return p;
  }

  /**
   * A new dir under this test's root owned by an unprivileged user (uid and gid 1000), as a project
   * dir on a real host is: berth never binds a root-owned dir read-write, and a sandbox bound to
   * this one runs as 1000.
   */
  userDir(...parts: string[]): string {
    const p = this.mkdir(...parts);
    if (process.getuid?.() === 0) chownSync(p, PROJECT_UID, PROJECT_UID);
    return p;
  }

  async open(config: BerthConfig, opts: Omit<BrokerOptions, 'config' | 'berthHome'> = {}): Promise<Broker> {
    const broker = await Broker.open({ config, berthHome: this.home, env: { PATH: process.env['PATH'] }, ...opts });
    this.brokers.push(broker);
    return broker;
  }

  containers(): Promise<ContainerSummary[]> {
    return containersOf(this.installation);
  }

  async cleanup(): Promise<string[]> {
    for (const b of this.brokers.splice(0)) await b.close({ graceMs: 2_000 }).catch(() => undefined);
    const removed = await removeContainersOf(this.installation);
    removed.push(...(await removeNetworksOf(this.installation)));
    removed.push(...(await removeImagesOf(this.installation)));
    // Persistent sandboxes' disk images are mounted under BERTH_HOME: down before the dirs go.
    removed.push(...unmountAllUnder(this.root));
    rmSync(this.root, { recursive: true, force: true });
    return removed;
  }
}

/**
 * Per-file registry of installations: `track()` in a test, `cleanupAll()` in afterEach. Containers
 * a test left behind are reported with their ids (a broker that closed properly leaves only
 * persistent ones, which are expected).
 */
export function installs(prefix?: string): { track(): TestInstall; cleanupAll(): Promise<string[]>; readonly ids: string[] } {
  const live: TestInstall[] = [];
  const ids: string[] = [];
  return {
    ids,
    track() {
      const t = new TestInstall(prefix);
      live.push(t);
      ids.push(t.installation);
      return t;
    },
    async cleanupAll() {
      const removed: string[] = [];
      for (const t of live.splice(0)) removed.push(...(await t.cleanup()));
      return removed;
    },
  };
}

/** Fail loudly if any container or network of these installations survived (run in afterAll). */
export async function assertNoneLeft(installations: string[]): Promise<void> {
  const left: ContainerSummary[] = [];
  const nets: NetworkSummary[] = [];
  for (const i of installations) {
    left.push(...(await containersOf(i)));
    nets.push(...(await networksOf(i)));
  }
  await Promise.all(left.map((c) => docker.getContainer(c.id).remove({ force: true }).catch(() => undefined)));
  await Promise.all(nets.map((n) => docker.getNetwork(n.id).remove().catch(() => undefined)));
  if (left.length > 0 || nets.length > 0) {
    throw new Error(`berth containers or networks survived the suite (now removed): ${describeContainers(left)}; networks: ${nets.map((n) => n.name).join(' ') || '(none)'}`);
  }
}

/**
 * The lifecycle every docker suite shares: the test image before, per-test cleanup (after the
 * suite's own `before` step, e.g. stopping servers) by installation label, and a final check that
 * no container of these installations survived.
 */
export function dockerSuiteHooks(reg: { cleanupAll(): Promise<string[]>; readonly ids: string[] }, before?: () => Promise<void>): void {
  beforeAll(ensureImage, 180_000);
  afterEach(async () => {
    await before?.();
    await reg.cleanupAll();
  }, 60_000);
  afterAll(async () => {
    await assertNoneLeft(reg.ids);
  });
}
