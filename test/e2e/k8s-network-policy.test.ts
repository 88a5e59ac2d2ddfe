import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { V1NetworkPolicy } from '@kubernetes/client-node';
import { KubernetesBackend } from '../../src/backends/kubernetes/kubernetes-backend.js';
import { tenantNetworkPolicy } from '../../src/backends/kubernetes/manifests.js';
import { ensureNetworkPolicy } from '../../src/backends/kubernetes/network-policies.js';
import { KUBERNETES_DEFAULTS, type KubernetesSettings } from '../../src/backends/kubernetes/settings.js';
import { BackendUnavailableError } from '../../src/errors.js';
import { describeStandin } from '../k8s-standin/describe-standin.js';
import { standinAdminClient, standinClient } from '../k8s-standin/fixtures.js';
import { StandinApiServer } from '../k8s-standin/server.js';

/*
 * berth reads its tenant NetworkPolicies back: when it makes sure one exists (the answer of its
 * create is the object after admission) and at start-up (the installation's list). A policy
 * someone edited, or an admission webhook changed, is an error naming it and the fix. The
 * stand-in stores policies as a real API server does (defaults, empty lists dropped) and serves
 * updates as kubectl sends them. No pod is started.
 */

describeStandin('kubernetes NetworkPolicies read back (stand-in API server, real client)', () => {
  let server: StandinApiServer;

  beforeAll(async () => {
    server = await StandinApiServer.start();
  });
  afterAll(async () => {
    await server?.stop();
  });

  const k: KubernetesSettings = { ...KUBERNETES_DEFAULTS };
  const installation = (): string => `inst-${randomBytes(4).toString('hex')}`;
  const failure = async (p: Promise<unknown>): Promise<Error> => {
    const err = await p.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    return err as Error;
  };

  it('a policy as berth wrote it passes, again and at start-up; one edited with kubectl is an error there and at the next ensure, naming it and the fix', async () => {
    const client = standinClient(server);
    const inst = installation();
    const backend = new KubernetesBackend({ installation: inst, kubeConfig: server.kubeConfig('berth'), sections: [k] });
    const np = tenantNetworkPolicy(inst, 'acme', k);
    const name = np.metadata!.name!;
    await ensureNetworkPolicy(client, np);
    await ensureNetworkPolicy(client, np);
    await ensureNetworkPolicy(client, tenantNetworkPolicy(inst, 'acme', { ...k, network: 'none' }));
    await backend.check(k);

    // kubectl edit by an admin (berth's Role never updates a policy): an ingress rule from everywhere.
    const admin = standinAdminClient(server);
    const live = await admin.networking.readNamespacedNetworkPolicy({ namespace: 'berth', name });
    live.spec!.ingress = [{}];
    await admin.networking.replaceNamespacedNetworkPolicy({ namespace: 'berth', name, body: live });
    const atStart = await failure(backend.check(k));
    expect(atStart.message).toBe(
      `kubernetes: NetworkPolicy ${name} (spec.ingress: is [{}], berth writes absent) in namespace "berth" is not what berth writes: someone edited it or an admission webhook changed it, so berth cannot vouch for its sandboxes' network; ` +
        `delete it (kubectl delete networkpolicy -n berth ${name}) and berth writes it again before the tenant's next sandbox, or set kubernetes.networkPolicy: false to manage network policy yourself`,
    );
    expect((await failure(ensureNetworkPolicy(client, np))).message).toContain(`NetworkPolicy ${name} (spec.ingress: is [{}], berth writes absent)`);
    // Another installation's policies are not this one's business.
    await new KubernetesBackend({ installation: installation(), kubeConfig: server.kubeConfig('berth'), sections: [k] }).check(k);
    // Deleted, it is written again and passes.
    await admin.networking.deleteNamespacedNetworkPolicy({ namespace: 'berth', name });
    await ensureNetworkPolicy(client, np);
    await backend.check(k);
  });

  it('settings the live policies were not written with (a changed DNS address) are named at start-up', async () => {
    const inst = installation();
    await ensureNetworkPolicy(standinClient(server), tenantNetworkPolicy(inst, 'acme', k));
    const moved = { ...k, dnsAddresses: ['169.254.25.10'] };
    const err = await failure(new KubernetesBackend({ installation: inst, kubeConfig: server.kubeConfig('berth'), sections: [moved] }).check(moved));
    expect(err.message).toContain('(spec.egress[0].to[1].ipBlock.cidr: is "169.254.20.10/32", berth writes "169.254.25.10/32")');
  });

  it('a mutating webhook that changes the policy on its way in fails the ensure that created it', async () => {
    const client = standinClient(server);
    const np = tenantNetworkPolicy(installation(), 'acme', k);
    server.mutateNetworkPolicy = (p) => {
      const spec = p['spec'] as V1NetworkPolicy['spec'] & object;
      spec.egress = [...(spec.egress ?? []), { to: [{ ipBlock: { cidr: '10.0.0.0/8' } }] }];
    };
    try {
      const err = await failure(ensureNetworkPolicy(client, np));
      expect(err.message).toContain(`NetworkPolicy ${np.metadata!.name!} (spec.egress: is [`);
    } finally {
      server.mutateNetworkPolicy = undefined;
    }
  });

  it('the stand-in is strict about updates as a real server is: an unknown field is 400, a stale resourceVersion 409', async () => {
    const client = standinClient(server);
    const np = tenantNetworkPolicy(installation(), 'acme', k);
    const name = np.metadata!.name!;
    await ensureNetworkPolicy(client, np);
    const live = await client.networking.readNamespacedNetworkPolicy({ namespace: 'berth', name });
    const put = (body: object): Promise<Response> => server.fetch(`/apis/networking.k8s.io/v1/namespaces/berth/networkpolicies/${name}?fieldValidation=Strict`, {
      method: 'PUT', headers: { 'content-type': 'application/json', authorization: `Bearer ${server.adminToken}` }, body: JSON.stringify(body),
    });
    const unknown = await put({ ...live, spec: { ...live.spec, bogus: true } });
    expect([unknown.status, ((await unknown.json()) as { message: string }).message]).toEqual([400, 'strict decoding error: unknown field "spec.bogus"']);
    expect((await put(live)).status).toBe(200);
    const stale = await put(live);
    expect([stale.status, ((await stale.json()) as { reason: string }).reason]).toEqual([409, 'Conflict']);
  });
});
