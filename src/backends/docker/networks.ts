import type Dockerode from 'dockerode';
import { networkOf, type Lease, type SandboxSpec } from '../backend.js';
import { BerthError, PolicyRefusedError } from '../../errors.js';
import { BRIDGE_NAME_OPTION, guardedBridgeName, unguardedNetworks } from '../../egress/guarded-bridges.js';
import { KeyedLock } from '../../kit/keyed-lock.js';
import { LABEL } from './container-spec.js';
import { bounded, ENGINE_REQUEST_TIMEOUT_MS, engineMessage, fromDockerError, statusOf } from './engine.js';
import { chooseShard, isTenantNetwork, networkName, SHARD_LABEL, shardCapacity, ShardCounts } from './network-shards.js';
import type { DockerSettings } from './settings.js';

/** How long a listing of a tenant's networks is reused by the creates that follow it. */
const SHARDS_FRESH_MS = 10_000;

/** A lease that serialises the callers of this process only, per name. */
export function localLease(): Lease {
  const locks = new KeyedLock();
  return <T>(name: string, fn: () => Promise<T>): Promise<T> => locks.run(name, fn);
}

/**
 * Driver options of every berth network: no traffic between the bridge's own ports; IP
 * masquerade stays on, so egress is what the engine gives any bridge.
 */
export const NETWORK_OPTIONS: Readonly<Record<string, string>> = {
  'com.docker.network.bridge.enable_icc': 'false',
  'com.docker.network.bridge.enable_ip_masquerade': 'true',
};

export interface NetworkRef {
  id: string;
  name: string;
}

interface Shard extends NetworkRef {
  shard: number;
  capacity: number;
}

/**
 * The tenant networks of one installation on one engine (see network-shards.ts): which shard a
 * new sandbox joins, creating it under a lease so racing processes end with one network, and
 * removing the ones no container uses.
 */
export class SandboxNetworks {
  /** Containers of this process being created on a network, by network name: never reaped. */
  private readonly pending = new Map<string, number>();
  /** Network creates in flight in this process: concurrent first sandboxes of a tenant share one. */
  private readonly creating = new Map<string, Promise<NetworkRef>>();
  /** Shard member counts per tenant, reused between creates (see ShardCounts). */
  private readonly counts = new Map<string, ShardCounts>();
  /**
   * Each tenant's shard networks as last listed, reused for SHARDS_FRESH_MS: the creates that
   * follow a listing ask the engine no more (those started together before it each ask). One
   * another process removed meanwhile fails its create or move (404), and the caller forgets the
   * list and joins again (`forget`); a shard missing from it is listed again before it is joined
   * or made; a network this process creates or removes drops the list.
   */
  private readonly listed = new Map<string, { at: number; shards: Shard[] }>();

  constructor(
    private readonly o: { docker: Dockerode; installation: string; lease: Lease; log: (msg: string) => void },
  ) {}

  /**
   * The network a new sandbox of `tenant` joins (created when needed). Call `release` once the
   * container exists or its create failed: until then this process never reaps that network.
   */
  async join(tenant: string): Promise<{ network: NetworkRef; release: () => void }> {
    let fromMemory = this.knownFresh(tenant);
    let shards = await this.shardsOf(tenant);
    let shard: number;
    for (;;) {
      const counts = this.countsOf(tenant);
      let chosen = counts.choose(shards, Date.now());
      if (chosen === undefined) {
        const members = await this.membersOf(tenant);
        for (const [name, n] of this.pending) members.set(name, (members.get(name) ?? 0) + n);
        counts.counted(members, Date.now());
        chosen = chooseShard(shards.map((s) => ({ shard: s.shard, capacity: s.capacity, members: members.get(s.name) ?? 0 })));
      }
      // A shard the list from memory lacks may have been made (and filled) by another process since: ask the engine.
      if (!fromMemory || shards.some((s) => s.shard === chosen)) {
        shard = chosen;
        break;
      }
      this.forget(tenant);
      shards = await this.shardsOf(tenant);
      fromMemory = false;
    }
    // Looked up again: another tenant's join may have dropped this entry as stale while this one awaited.
    const counts = this.countsOf(tenant);
    const name = networkName(this.o.installation, tenant, shard);
    counts.joined(name);
    this.pending.set(name, (this.pending.get(name) ?? 0) + 1);
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      const left = (this.pending.get(name) ?? 1) - 1;
      if (left > 0) this.pending.set(name, left);
      else this.pending.delete(name);
    };
    try {
      const found = shards.find((s) => s.shard === shard);
      const network = found ?? (await this.created(tenant, shard, name));
      return { network, release };
    } catch (err) {
      release();
      throw err;
    }
  }

  /** The member counts of `tenant`'s shards (counts of other tenants that went stale are dropped here). */
  private countsOf(tenant: string): ShardCounts {
    let counts = this.counts.get(tenant);
    if (counts === undefined) {
      const now = Date.now();
      for (const [t, c] of this.counts) if (c.stale(now)) this.counts.delete(t);
      counts = new ShardCounts();
      this.counts.set(tenant, counts);
    }
    return counts;
  }

  /** One engine request with the deadline every engine call has (engine.ts `bounded`). */
  private req<T>(doing: string, run: (abortSignal: AbortSignal) => Promise<T>, timeoutMs = ENGINE_REQUEST_TIMEOUT_MS): Promise<T> {
    return bounded(this.o.docker, timeoutMs, doing, run);
  }

  /**
   * An existing container's network, checked on adoption. It is fixed at create, like the mount: a
   * sandbox with network access while the config says none (or the reverse) is refused. One made
   * before tenant networks, on the engine's default bridge where sandboxes reach each other, is
   * moved onto its tenant's network. Returns the container as it is now.
   */
  async place(spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo): Promise<Dockerode.ContainerInspectInfo> {
    const want = networkOf(spec);
    const isolated = info.HostConfig.NetworkMode === 'none';
    if (want === 'none' || isolated) {
      if (want === 'none' && isolated) return info;
      throw new PolicyRefusedError(
        `sandbox "${spec.identity.key}" (container ${info.Id.slice(0, 12)}) was created ${isolated ? 'without a network' : 'with a network'} ` +
          `but its network is now "${want}" (docker.network, egress.mode); the network is fixed when the sandbox is created: remove it (berth rm with the same scope flags) and it is created again`,
      );
    }
    const attached = Object.keys(info.NetworkSettings?.Networks ?? {});
    const foreign = attached.filter((n) => !isTenantNetwork(this.o.installation, spec.identity.tenant, n));
    if (attached.length > 0 && foreign.length === 0) return info;
    const moved = await this.moveTo(info.Id, spec.identity.tenant, foreign);
    this.o.log(`${spec.identity.key}: moved ${info.Id.slice(0, 12)} from ${foreign.join(', ') || 'no network'} onto ${moved.name}`);
    try {
      return await this.req(`inspect container ${info.Id.slice(0, 12)}`, (abortSignal) => this.o.docker.getContainer(info.Id).inspect({ abortSignal }));
    } catch (err) {
      throw fromDockerError(this.o.docker, err, `inspect container ${info.Id.slice(0, 12)}`);
    }
  }

  /**
   * Moves a container made before tenant networks (on the engine's default bridge, where sandboxes
   * reach each other) onto a network of its tenant, and off the networks named in `leave`.
   */
  private async moveTo(containerId: string, tenant: string, leave: readonly string[]): Promise<NetworkRef> {
    let { network, release } = await this.join(tenant);
    try {
      const connect = (n: NetworkRef): Promise<unknown> =>
        this.req(`connect to network ${n.name}`, (abortSignal) => this.o.docker.getNetwork(n.id).connect({ Container: containerId, abortSignal } as Dockerode.NetworkConnectOptions));
      try {
        await connect(network);
      } catch (err) {
        // Removed by another process since this one listed it: listed and joined once more.
        if (!isNetworkGone(err)) throw err;
        this.forget(tenant);
        release();
        ({ network, release } = await this.join(tenant));
        await connect(network);
      }
      for (const name of leave) {
        await this.req(`disconnect from network ${name}`, (abortSignal) => this.o.docker.getNetwork(name).disconnect({ Container: containerId, Force: true, abortSignal } as object));
      }
      return network;
    } catch (err) {
      this.forget(tenant);
      throw fromDockerError(this.o.docker, err, `move container ${containerId.slice(0, 12)} onto network ${network.name}`);
    } finally {
      release();
    }
  }

  /**
   * This installation's networks whose bridge the host guard does not match (made by a berth
   * before bridges were named `bth…`): a sandbox on one reaches the host's services.
   */
  async unguarded(): Promise<string[]> {
    try {
      const list = await this.req('list networks', (abortSignal) => this.o.docker.listNetworks({ filters: { label: [`${LABEL.managed}=true`, `${LABEL.installation}=${this.o.installation}`] }, abortSignal }));
      return unguardedNetworks(list);
    } catch (err) {
      throw fromDockerError(this.o.docker, err, 'list networks');
    }
  }

  /**
   * Removes this installation's networks that no container (running or not) is attached to and
   * no create of this process is about to use. Returns their names. `timeoutMs` bounds each
   * request (a closing process asks with a short one).
   */
  async reapIdle(timeoutMs = ENGINE_REQUEST_TIMEOUT_MS): Promise<string[]> {
    let networks: Dockerode.NetworkInspectInfo[];
    let containers: Dockerode.ContainerInfo[];
    try {
      [networks, containers] = await Promise.all([
        this.req('list networks', (abortSignal) => this.o.docker.listNetworks({ filters: { label: [`${LABEL.managed}=true`, `${LABEL.installation}=${this.o.installation}`] }, abortSignal }), timeoutMs),
        this.req('list containers', (abortSignal) => this.o.docker.listContainers({ all: true, filters: { label: [`${LABEL.installation}=${this.o.installation}`] }, abortSignal }), timeoutMs),
      ]);
    } catch (err) {
      throw fromDockerError(this.o.docker, err, 'list networks');
    }
    const used = new Set(containers.flatMap((c) => Object.keys(c.NetworkSettings?.Networks ?? {})));
    const removed: string[] = [];
    for (const n of networks) {
      if (n.Labels?.[LABEL.installation] !== this.o.installation || used.has(n.Name) || this.pending.has(n.Name)) continue;
      try {
        await this.req(`remove network ${n.Name}`, (abortSignal) => this.o.docker.getNetwork(n.Id).remove({ abortSignal }), timeoutMs);
        this.listed.clear();
        removed.push(n.Name);
        this.o.log(`removed idle network ${n.Name}`);
      } catch (err) {
        // 404: gone already; 403: a container joined since the listing (it has an endpoint now).
        const status = statusOf(err);
        if (status !== 404 && status !== 403) throw fromDockerError(this.o.docker, err, `remove network ${n.Name}`);
      }
    }
    return removed;
  }

  /** Containers of the tenant (any state) per network name. */
  private async membersOf(tenant: string): Promise<Map<string, number>> {
    let list: Dockerode.ContainerInfo[];
    try {
      list = await this.req('list containers', (abortSignal) => this.o.docker.listContainers({
        all: true,
        filters: { label: [`${LABEL.installation}=${this.o.installation}`, `${LABEL.tenant}=${tenant}`] },
        abortSignal,
      }));
    } catch (err) {
      throw fromDockerError(this.o.docker, err, 'list containers');
    }
    const members = new Map<string, number>();
    for (const c of list) {
      for (const name of Object.keys(c.NetworkSettings?.Networks ?? {})) members.set(name, (members.get(name) ?? 0) + 1);
    }
    return members;
  }

  /** Drops what this process knows of `tenant`'s networks: the next join lists them again. */
  forget(tenant: string): void {
    this.listed.delete(tenant);
  }

  /** Whether `tenant`'s networks are known from a listing young enough to be used. */
  private knownFresh(tenant: string): boolean {
    const known = this.listed.get(tenant);
    return known !== undefined && Date.now() - known.at < SHARDS_FRESH_MS;
  }

  /**
   * The tenant's shard networks as the engine has them (one per shard: the lowest id wins a
   * duplicate), as listed at most SHARDS_FRESH_MS ago.
   */
  private async shardsOf(tenant: string): Promise<Shard[]> {
    const known = this.listed.get(tenant);
    if (known !== undefined && this.knownFresh(tenant)) return known.shards;
    const at = Date.now();
    let list: Dockerode.NetworkInspectInfo[];
    try {
      list = await this.req('list networks', (abortSignal) => this.o.docker.listNetworks({
        filters: { label: [`${LABEL.managed}=true`, `${LABEL.installation}=${this.o.installation}`, `${LABEL.tenant}=${tenant}`] },
        abortSignal,
      }));
    } catch (err) {
      throw fromDockerError(this.o.docker, err, 'list networks');
    }
    const shards = new Map<number, Shard>();
    for (const n of [...list].sort((a, b) => a.Id.localeCompare(b.Id))) {
      const shard = Number(n.Labels?.[SHARD_LABEL]);
      // Only a network whose name, labels and shard all agree is one of ours.
      if (!Number.isInteger(shard) || shard < 0 || n.Name !== networkName(this.o.installation, tenant, shard)) continue;
      if (!this.isOurs(n, tenant) || shards.has(shard)) continue;
      shards.set(shard, { id: n.Id, name: n.Name, shard, capacity: shardCapacity((n.IPAM?.Config ?? []).map((c) => c.Subnet ?? '')) });
    }
    const found = [...shards.values()];
    // Lists gone stale are dropped here: one entry per tenant seen recently, not per tenant ever seen.
    for (const [t, l] of this.listed) if (Date.now() - l.at >= SHARDS_FRESH_MS) this.listed.delete(t);
    this.listed.set(tenant, { at, shards: found });
    return found;
  }

  private created(tenant: string, shard: number, name: string): Promise<NetworkRef> {
    let p = this.creating.get(name);
    if (p === undefined) {
      p = this.o.lease(`docker-network:${name}`, () => this.create(tenant, shard, name)).finally(() => {
        this.creating.delete(name);
        this.forget(tenant);
      });
      this.creating.set(name, p);
    }
    return p;
  }

  /** Creates shard `shard`, or adopts it when another process made it first. Runs under its lease. */
  private async create(tenant: string, shard: number, name: string): Promise<NetworkRef> {
    const existing = await this.lookup(name, tenant);
    if (existing !== undefined) return existing;
    try {
      const created = await this.req(`create network ${name}`, (abortSignal) => this.o.docker.createNetwork({
        abortSignal,
        Name: name,
        CheckDuplicate: true,
        Driver: 'bridge',
        Internal: false,
        Attachable: false,
        EnableIPv6: false,
        // The interface name the host guard matches (egress/docker-guard.ts).
        Options: { ...NETWORK_OPTIONS, [BRIDGE_NAME_OPTION]: guardedBridgeName(name) },
        Labels: {
          [LABEL.managed]: 'true',
          [LABEL.installation]: this.o.installation,
          [LABEL.tenant]: tenant,
          [SHARD_LABEL]: String(shard),
        },
      }));
      this.o.log(`created network ${name} for tenant "${tenant}"`);
      return { id: created.id, name };
    } catch (err) {
      // 409: the name exists (an engine check, not atomic: the lease is what keeps racing
      // berth processes from creating two); adopt it only if it is ours.
      if (statusOf(err) === 409) {
        const raced = await this.lookup(name, tenant);
        if (raced !== undefined) return raced;
      }
      if (/available, non-overlapping IPv4 address pool/i.test(engineMessage(err))) {
        throw new BerthError(
          'engine_refused',
          `docker has no free address pool for network ${name} (tenant "${tenant}"): every tenant with sandboxes needs one bridge network, ` +
            'and the engine\'s default pools hold about 30; add "default-address-pools" to /etc/docker/daemon.json ' +
            '(e.g. [{"base": "10.200.0.0/14", "size": 22}]: 256 networks of 1,022 addresses, in a range your hosts do not use) ' +
            'and restart dockerd, or set docker.network: none',
          { cause: err },
        );
      }
      throw fromDockerError(this.o.docker, err, `create network ${name}`);
    }
  }

  /** The network named exactly `name` if it is ours; a foreign one of that name is refused. */
  private async lookup(name: string, tenant: string): Promise<NetworkRef | undefined> {
    let list: Dockerode.NetworkInspectInfo[];
    try {
      list = await this.req('list networks', (abortSignal) => this.o.docker.listNetworks({ filters: { name: [name] }, abortSignal }));
    } catch (err) {
      throw fromDockerError(this.o.docker, err, 'list networks');
    }
    const exact = list.filter((n) => n.Name === name).sort((a, b) => a.Id.localeCompare(b.Id));
    const ours = exact.find((n) => this.isOurs(n, tenant));
    if (ours !== undefined) return { id: ours.Id, name };
    const foreign = exact[0];
    if (foreign === undefined) return undefined;
    throw new PolicyRefusedError(
      `network ${name} (${foreign.Id.slice(0, 12)}) exists but is not berth's network for tenant "${tenant}" of this installation ` +
        `(labels ${LABEL.installation}=${foreign.Labels?.[LABEL.installation] ?? 'none'}, ${LABEL.tenant}=${foreign.Labels?.[LABEL.tenant] ?? 'none'}); ` +
        `berth never joins it: remove it (docker network rm ${name})`,
    );
  }

  private isOurs(n: Dockerode.NetworkInspectInfo, tenant: string): boolean {
    const l = n.Labels ?? {};
    return l[LABEL.managed] === 'true' && l[LABEL.installation] === this.o.installation && l[LABEL.tenant] === tenant;
  }
}

/** An engine refusal because a network no longer exists (404 "network … not found"). */
export function isNetworkGone(err: unknown): boolean {
  const raw = err instanceof BerthError && err.cause !== undefined ? err.cause : err;
  return statusOf(raw) === 404 && /^network .* not found/i.test(engineMessage(raw));
}
