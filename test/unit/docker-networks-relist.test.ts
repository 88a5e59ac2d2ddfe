import type Dockerode from 'dockerode';
import { describe, expect, it } from 'vitest';
import type { SandboxSpec } from '../../src/backends/backend.js';
import { LABEL } from '../../src/backends/docker/container-spec.js';
import { localLease, SandboxNetworks } from '../../src/backends/docker/networks.js';
import { networkName, SHARD_LABEL } from '../../src/backends/docker/network-shards.js';
import type { DockerSettings } from '../../src/backends/docker/settings.js';

/*
 * Two berth processes of one installation sharing an engine's tenant networks: each remembers a
 * tenant's network list for a few seconds, so the other's changes meanwhile (a new shard it made
 * and filled, a network it removed) must be found before this one acts on its memory. The engine
 * is a stand-in holding networks and containers in memory: what is tested is berth's logic of
 * listing, choosing and retrying (a real engine would need ~1,000 containers to fill a shard).
 * Its networks have /29 subnets: 5 members fill a shard.
 */

const INSTALLATION = 'inst-relist';
const TENANT = 'acme';

interface FakeNetwork { Id: string; Name: string; Labels: Record<string, string>; IPAM: { Config: Array<{ Subnet: string }> } }
interface FakeContainer { Id: string; Labels: Record<string, string>; networks: Set<string> }

/** An engine of networks and containers; `connects` counts each connect asked, by network name. */
class FakeEngine {
  readonly networks: FakeNetwork[] = [];
  readonly containers: FakeContainer[] = [];
  readonly connects: string[] = [];
  private next = 0;

  /** A container of the tenant on network `name`, as another process's create leaves it. */
  member(name: string): void {
    this.containers.push({ Id: `c${++this.next}`, Labels: { [LABEL.installation]: INSTALLATION, [LABEL.tenant]: TENANT }, networks: new Set([name]) });
  }

  removeNetwork(name: string): void {
    this.networks.splice(this.networks.findIndex((n) => n.Name === name), 1);
  }

  get docker(): Dockerode {
    const labelled = (labels: Record<string, string>, filters: string[] | undefined) =>
      (filters ?? []).every((f) => {
        const [k, v] = f.split('=') as [string, string | undefined];
        return v === undefined ? k in labels : labels[k] === v;
      });
    const gone = (name: string) => Object.assign(new Error(`network ${name} not found`), { statusCode: 404, json: { message: `network ${name} not found` } });
    return {
      listNetworks: async (o: { filters: { label?: string[]; name?: string[] } }) =>
        this.networks.filter((n) => labelled(n.Labels, o.filters.label) && (o.filters.name === undefined || o.filters.name.some((x) => n.Name.includes(x))))
          .map((n) => structuredClone(n)),
      listContainers: async (o: { filters: { label?: string[] } }) =>
        this.containers.filter((c) => labelled(c.Labels, o.filters.label))
          .map((c) => ({ Id: c.Id, Labels: c.Labels, NetworkSettings: { Networks: Object.fromEntries([...c.networks].map((n) => [n, {}])) } })),
      createNetwork: async (o: { Name: string; Labels: Record<string, string> }) => {
        if (this.networks.some((n) => n.Name === o.Name)) throw Object.assign(new Error('exists'), { statusCode: 409 });
        const id = `n${String(++this.next).padStart(4, '0')}`;
        this.networks.push({ Id: id, Name: o.Name, Labels: o.Labels, IPAM: { Config: [{ Subnet: `10.9.${this.next}.0/29` }] } });
        return { id };
      },
      getNetwork: (id: string) => ({
        connect: async (o: { Container: string }) => {
          const n = this.networks.find((x) => x.Id === id);
          this.connects.push(n?.Name ?? id);
          if (n === undefined) throw gone(id);
          this.containers.find((c) => c.Id === o.Container)?.networks.add(n.Name);
        },
        disconnect: async (o: { Container: string }) => {
          this.containers.find((c) => c.Id === o.Container)?.networks.delete(id);
        },
      }),
      getContainer: (id: string) => ({
        inspect: async () => {
          const c = this.containers.find((x) => x.Id === id)!;
          return { Id: c.Id, HostConfig: { NetworkMode: 'bridge' }, NetworkSettings: { Networks: Object.fromEntries([...c.networks].map((n) => [n, {}])) } };
        },
      }),
    } as unknown as Dockerode;
  }
}

function processOn(engine: FakeEngine): SandboxNetworks {
  return new SandboxNetworks({ docker: engine.docker, installation: INSTALLATION, lease: localLease(), log: () => undefined });
}

const shard = (n: number): string => networkName(INSTALLATION, TENANT, n);

describe('tenant networks shared by two berth processes', () => {
  it('a shard another process made and filled since this one listed is found before a sandbox joins: it goes to the next shard, not the full one', async () => {
    const engine = new FakeEngine();
    const a = processOn(engine);
    const b = processOn(engine);
    // A makes shard 0 and lists it (the list is reused for the next seconds).
    const first = await a.join(TENANT);
    first.release();
    engine.member(shard(0));
    (await a.join(TENANT)).release();
    engine.member(shard(0));
    // Meanwhile B fills shard 0, makes shard 1 and fills it too.
    for (let i = 0; i < 3; i++) engine.member(shard(0));
    const made = await b.join(TENANT);
    made.release();
    expect(made.network.name).toBe(shard(1));
    for (let i = 0; i < 5; i++) engine.member(shard(1));
    // A's memory has only shard 0 (full): it lists again, sees shard 1 full, and makes shard 2.
    const joined = await a.join(TENANT);
    joined.release();
    expect(joined.network.name).toBe(shard(2));
    expect(engine.networks.map((n) => n.Labels[SHARD_LABEL])).toEqual(['0', '1', '2']);
  });

  it('moving a container onto a network another process removed since this one listed it: listed again and joined once more', async () => {
    const engine = new FakeEngine();
    const a = processOn(engine);
    // Shard 0 exists and A has listed it.
    (await a.join(TENANT)).release();
    (await a.join(TENANT)).release();
    const old = engine.networks[0]!;
    // Another process removes it (its last container went), within A's listing's lifetime.
    engine.removeNetwork(old.Name);
    // A container from before tenant networks, on the engine's default bridge.
    engine.containers.push({ Id: 'legacy', Labels: { [LABEL.installation]: INSTALLATION, [LABEL.tenant]: TENANT }, networks: new Set(['bridge']) });
    const spec = { identity: { tenant: TENANT, key: 'session:s1' }, section: { network: 'bridge' } } as unknown as SandboxSpec<DockerSettings>;
    const info = { Id: 'legacy', HostConfig: { NetworkMode: 'bridge' }, NetworkSettings: { Networks: { bridge: {} } } } as unknown as Dockerode.ContainerInspectInfo;
    const after = await a.place(spec, info);
    // The first connect found the old network gone; the second went to shard 0 made again.
    expect(engine.connects).toEqual([old.Id, shard(0)]);
    const remade = engine.networks.find((n) => n.Name === shard(0))!;
    expect(remade.Id).not.toBe(old.Id);
    expect(Object.keys(after.NetworkSettings.Networks)).toEqual([shard(0)]);
  });
});
