import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { V1Pod } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { ApiTransport } from '../../src/backends/kubernetes/api-transport.js';
import { execOnceInPod } from '../../src/backends/kubernetes/exec-once.js';
import { kubeClient } from '../../src/backends/kubernetes/kube-client.js';
import { ConfigError } from '../../src/errors.js';
import { sandboxPod } from '../../src/backends/kubernetes/manifests.js';
import { tenantPolicyName } from '../../src/backends/kubernetes/names.js';
import { ensurePodSandbox } from '../../src/backends/kubernetes/pod-sandboxes.js';
import { createEphemeralPod, deletePod, listPods, waitForPodGone, waitForRunning } from '../../src/backends/kubernetes/pods.js';
import { describeStandin, ensureStandinImage } from '../k8s-standin/describe-standin.js';
import { runningPod, sandboxInput, standinAdminClient, standinClient } from '../k8s-standin/fixtures.js';
import { StandinApiServer } from '../k8s-standin/server.js';
import { makeStandinTls } from '../k8s-standin/test-ca.js';
import { roleRules } from '../k8s-standin/rbac.js';
import { REQUIRED_PERMISSIONS } from '../../src/backends/kubernetes/permissions.js';
import { KubernetesBackend } from '../../src/backends/kubernetes/kubernetes-backend.js';
import { KUBERNETES_DEFAULTS } from '../../src/backends/kubernetes/settings.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * Where the stand-in is as strict as a real API server, and berth's pods pass: TLS with a CA made
 * for the run (REST and the exec WebSocket), unknown fields under strict field validation (400,
 * not 422), a namespace's compute ResourceQuota and LimitRange (403 Forbidden from
 * admission), and RBAC: berth's token may do what deploy/rbac.yaml's Role grants, nothing more.
 * Each pod is created through berth's own call.
 */

describeStandin('stand-in API server strictness, with berth\'s pods', () => {
  let server: StandinApiServer;

  beforeAll(async () => {
    await ensureStandinImage();
    server = await StandinApiServer.start();
  });
  afterAll(async () => {
    await server?.stop();
  });

  const statusOf = async (p: Promise<unknown>): Promise<{ code: number; body: { reason?: string; message?: string } }> => {
    const err = (await p.then(() => undefined, (e: unknown) => e)) as { code: number; body: string } | undefined;
    if (err === undefined) throw new Error('expected the API server to refuse');
    return { code: err.code, body: JSON.parse(err.body) as { reason?: string; message?: string } };
  };

  it('serves HTTPS and wss with its own CA, carried in the kubeconfig as certificate-authority-data; REST shares one kept-alive connection; the token is still required, exec included', async () => {
    expect(server.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const exported = parse(server.kubeConfig('berth').exportConfig()) as { clusters: { cluster: Record<string, unknown> }[] };
    expect(exported.clusters[0]!.cluster).toEqual({ server: server.url, 'certificate-authority-data': Buffer.from(server.caPem!).toString('base64') });
    // A client that sends plain HTTP to the TLS port gets no API answer.
    const before = server.requests.total;
    const plain = await new Promise<string>((resolve) => {
      const req = request(server.url.replace('https:', 'http:') + '/version', (res) => {
        res.resume();
        resolve(`answered ${res.statusCode ?? 0}`);
      });
      req.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      req.end();
    });
    expect(plain).not.toMatch(/^answered 2/);
    expect(server.requests.total).toBe(before);
    expect((await server.fetch('/version', { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await server.fetch('/version')).status).toBe(200);
    // berth's REST calls share one kept-alive TLS connection (one handshake), its https agent built from the kubeconfig's CA.
    const pooled = standinClient(server, 'tls');
    const connections = server.requests.connections;
    for (let i = 0; i < 10; i++) await listPods(pooled, 'berth.dev/installation=inst');
    expect(server.requests.connections - connections).toBe(1);
    pooled.transport.close();
    const target = await runningPod(standinClient(server, 'tls'), sandboxInput('inst', { k: { namespace: 'tls' } }));
    const r = await execOnceInPod(target, ['sh', '-c', 'echo over-wss']);
    expect([r.exitCode, r.stdout.toString()]).toEqual([0, 'over-wss\n']);
    expect(server.execRequests.at(-1)).toContain(`/namespaces/tls/pods/${target.pod}/exec?`);
    // The exec upgrade over wss needs the token too.
    const wrongToken = server.kubeConfig('tls');
    wrongToken.users[0] = { ...wrongToken.users[0]!, token: 'wrong' };
    const refused = await execOnceInPod({ ...target, client: kubeClient(wrongToken, 'tls') }, ['true']).then(() => undefined, (e: unknown) => e);
    expect((refused as Error).message).toMatch(/pods\/exec was refused \(401\)/);
    await deletePod(target.client, target.pod);
  });

  it('a kubeconfig without the API server\'s CA, or with another CA, is a ConfigError naming the certificate, for REST and for exec, and is not retried', async () => {
    const target = await runningPod(standinClient(server, 'tls2'), sandboxInput('inst', { k: { namespace: 'tls2' } }));
    const other = await makeStandinTls();
    for (const caData of [undefined, Buffer.from(other.caPem).toString('base64')]) {
      const kc = server.kubeConfig('tls2');
      kc.clusters[0] = { ...kc.clusters[0]!, caData };
      const retries: number[] = [];
      const untrusting = kubeClient(kc, 'tls2', new ApiTransport(kc, { sleep: async (ms) => void retries.push(ms) }));
      const before = server.requests.total;
      const err = await listPods(untrusting, 'berth.dev/installation=inst').then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toBe(
        `kubernetes: could not list pods (berth.dev/installation=inst): berth does not trust the TLS certificate of the API server at ${server.url} (UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate); give the kubeconfig's cluster the CA that signed the API server's certificate (certificate-authority-data or certificate-authority), and check its server address matches the certificate; see kubernetes.kubeconfig / kubernetes.context`,
      );
      const execErr = await execOnceInPod({ ...target, client: untrusting }, ['true']).then(() => undefined, (e: unknown) => e);
      expect(execErr).toBeInstanceOf(ConfigError);
      expect((execErr as Error).message).toMatch(/^kubernetes: could not start "[^"]*" in pod \S+: berth does not trust the TLS certificate of the API server at https:\/\/127\.0\.0\.1:\d+ \(UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate\); give the kubeconfig's cluster the CA/);
      // Refused in the handshake (not one request reached the API), and not retried: the certificate would be the same.
      expect(server.requests.total).toBe(before);
      expect(retries).toEqual([]);
      untrusting.transport.close();
    }
    await deletePod(target.client, target.pod);
  });

  it('an unknown field under fieldValidation=Strict is 400 BadRequest naming it; an invalid value is 422 Invalid', async () => {
    // The typed client drops fields its model lacks, so the pod goes raw, as kubectl would send it.
    const post = async (body: object): Promise<{ code: number; body: { reason?: string; message?: string } }> => {
      const res = await server.fetch('/api/v1/namespaces/strict/pods?fieldValidation=Strict', {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
      });
      return { code: res.status, body: (await res.json()) as { reason?: string; message?: string } };
    };
    const pod = sandboxPod(sandboxInput('inst', { k: { namespace: 'strict' } }));
    const unknown = structuredClone(pod) as V1Pod & { spec: { containers: { bogus?: boolean }[] } };
    unknown.spec.containers[0]!.bogus = true;
    expect(await post(unknown)).toMatchObject({ code: 400, body: { reason: 'BadRequest', message: 'strict decoding error: unknown field "spec.containers[0].bogus"' } });
    const invalid = structuredClone(pod);
    invalid.metadata!.name = 'Not_A_Name';
    expect(await post(invalid)).toMatchObject({ code: 422, body: { reason: 'Invalid' } });
    // Custom resources go as sent through the client berth uses for them.
    const client = standinClient(server, 'strict');
    const sandbox = { apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', metadata: { name: 'x' }, spec: { podTemplate: { spec: pod.spec }, bogus: 1 } };
    const refused = await statusOf(client.custom.createNamespacedCustomObject({ group: 'agents.x-k8s.io', version: 'v1beta1', namespace: 'strict', plural: 'sandboxes', body: sandbox, fieldValidation: 'Strict' }));
    expect(refused).toMatchObject({ code: 400, body: { message: 'strict decoding error: unknown field "spec.bogus"' } });
  });

  it('an ownerReference without a uid is 422; a pod waits for its configMap volume\'s map as a kubelet does, and the map owned by the pod goes with it', async () => {
    const client = standinClient(server, 'owners');
    const map = (owner: Record<string, string>) => ({ metadata: { name: `m-${randomBytes(3).toString('hex')}`, ownerReferences: [owner] }, data: { a: 'b' } });
    const noUid = await statusOf(client.core.createNamespacedConfigMap({ namespace: 'owners', body: map({ apiVersion: 'v1', kind: 'Pod', name: 'p' }) as never }));
    expect(noUid).toMatchObject({ code: 422, body: { reason: 'Invalid' } });
    expect(noUid.body.message).toContain('metadata.ownerReferences[0].uid');
    // A pod whose map does not exist yet stays ContainerCreating, naming it, and runs once it does.
    const base = sandboxPod(sandboxInput('inst', { k: { namespace: 'owners' } }));
    const mapName = `${base.metadata!.name!}-ca`;
    const pod = structuredClone(base);
    pod.spec!.volumes = [...pod.spec!.volumes ?? [], { name: 'ca', configMap: { name: mapName } }];
    pod.spec!.containers[0]!.volumeMounts = [...pod.spec!.containers[0]!.volumeMounts ?? [], { name: 'ca', mountPath: '/etc/ca', readOnly: true }];
    const made = await createEphemeralPod(client, pod);
    let waiting = '';
    for (const deadline = Date.now() + 20_000; Date.now() < deadline && waiting === '';) {
      const live = await client.core.readNamespacedPod({ namespace: 'owners', name: made.metadata!.name! });
      waiting = live.status?.containerStatuses?.[0]?.state?.waiting?.message ?? '';
      if (waiting === '') await new Promise((r) => setTimeout(r, 100));
    }
    expect(waiting).toContain(`configmap "${mapName}" not found`);
    await client.core.createNamespacedConfigMap({ namespace: 'owners', body: { metadata: { name: mapName, ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: made.metadata!.name!, uid: made.metadata!.uid! }] }, data: { 'ca.pem': 'x' } } });
    await waitForRunning(client, made.metadata!.name!, 60_000);
    await deletePod(client, made.metadata!.name!);
    await waitForPodGone(client, made.metadata!.name!, 60_000);
    // Listed as an admin would (berth's Role only creates maps).
    const maps = (await standinAdminClient(server, 'owners').core.listNamespacedConfigMap({ namespace: 'owners' })).items.map((m) => m.metadata!.name);
    expect(maps).not.toContain(mapName);
  });

  it('a compute ResourceQuota refuses a pod without requests and limits, admits berth\'s, and refuses what would exceed it', async () => {
    const ns = 'quota';
    const client = standinClient(server, ns);
    // The operator's quota (berth's Role cannot make one).
    await standinAdminClient(server, ns).core.createNamespacedResourceQuota({
      namespace: ns,
      body: { apiVersion: 'v1', kind: 'ResourceQuota', metadata: { name: 'compute' }, spec: { hard: { 'requests.cpu': '1', 'requests.memory': '1Gi', 'limits.cpu': '4', 'limits.memory': '4Gi' } } },
    });
    const input = sandboxInput('inst', { k: { namespace: ns } });
    const bare = sandboxPod(input);
    delete bare.spec!.containers[0]!.resources;
    const refused = await statusOf(client.core.createNamespacedPod({ namespace: ns, body: bare, fieldValidation: 'Strict' }));
    expect(refused.code).toBe(403);
    expect(refused.body.message).toBe(`pods "${input.name}" is forbidden: failed quota: compute: must specify requests.cpu for: sandbox; requests.memory for: sandbox; limits.cpu for: sandbox; limits.memory for: sandbox`);

    await createEphemeralPod(client, sandboxPod(input));
    await waitForRunning(client, input.name, 60_000);
    // A second berth pod would take the namespace past limits.cpu 4 (2 + 2 fits; a third does not).
    const second = sandboxInput('inst', { k: { namespace: ns } });
    await createEphemeralPod(client, sandboxPod(second));
    const third = sandboxInput('inst', { k: { namespace: ns } });
    const over = await statusOf(client.core.createNamespacedPod({ namespace: ns, body: sandboxPod(third), fieldValidation: 'Strict' }));
    expect(over.code).toBe(403);
    // The quota admission plugin's wording, each exceeded resource as key=value.
    expect(over.body.message).toBe(`pods "${third.name}" is forbidden: exceeded quota: compute, requested: limits.cpu=2,limits.memory=2Gi, used: limits.cpu=4,limits.memory=4Gi, limited: limits.cpu=4,limits.memory=4Gi`);
    for (const name of [input.name, second.name]) {
      await deletePod(client, name);
      await waitForPodGone(client, name, 30_000);
    }
  });

  it('a LimitRange fills in what a pod leaves out and refuses a container over its max', async () => {
    const ns = 'ranged';
    const client = standinClient(server, ns);
    // The client's model names `default` `_default` and serializes it as `default`.
    await standinAdminClient(server, ns).core.createNamespacedLimitRange({
      namespace: ns,
      body: { apiVersion: 'v1', kind: 'LimitRange', metadata: { name: 'sandboxes' }, spec: { limits: [{ type: 'Container', _default: { memory: '512Mi' }, max: { cpu: '1' } }] } },
    });
    const input = sandboxInput('inst', { k: { namespace: ns, cpus: 1, cpuRequest: 0.5 } });
    const made = await client.core.createNamespacedPod({ namespace: ns, body: (() => {
      const p = sandboxPod(input);
      delete p.spec!.containers[0]!.resources!.limits!['memory'];
      return p;
    })(), fieldValidation: 'Strict' });
    expect(made.spec!.containers[0]!.resources!.limits!['memory']).toBe('512Mi');
    await deletePod(client, input.name);
    const big = sandboxInput('inst', { k: { namespace: ns } });
    const refused = await statusOf(client.core.createNamespacedPod({ namespace: ns, body: sandboxPod(big), fieldValidation: 'Strict' }));
    expect(refused).toMatchObject({ code: 403, body: { message: `pods "${big.name}" is forbidden: [maximum cpu usage per Container is 1, but limit is 2]` } });
    await waitForPodGone(client, input.name, 30_000);
  });

  it('RBAC: berth\'s token may do what deploy/rbac.yaml\'s Role grants and nothing more (403, and access reviews say the same); a Role without watch on pods fails berth\'s wait for a pod', async () => {
    const client = standinClient(server, 'rbac');
    const review = async (verb: string, group: string, resource: string, subresource?: string): Promise<boolean> => {
      const r = await server.fetch('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: { namespace: 'rbac', verb, group, resource, ...(subresource === undefined ? {} : { subresource }) } } }),
      });
      return ((await r.json()) as { status: { allowed: boolean } }).status.allowed;
    };
    // What berth calls is granted, verb by verb; what it never calls is not.
    for (const p of REQUIRED_PERMISSIONS) {
      const [resource, sub] = p.resource.split('/');
      for (const verb of p.verbs) expect(await review(verb, p.apiGroup, resource!, sub), `${verb} ${p.apiGroup}/${p.resource}`).toBe(true);
    }
    for (const [verb, group, resource] of [['update', 'networking.k8s.io', 'networkpolicies'], ['get', '', 'configmaps'], ['list', '', 'secrets'], ['create', '', 'resourcequotas'], ['watch', 'agents.x-k8s.io', 'sandboxes']] as const) {
      expect(await review(verb, group, resource), `${verb} ${group}/${resource}`).toBe(false);
    }
    const forbidden = await statusOf(client.core.listNamespacedConfigMap({ namespace: 'rbac' }));
    expect(forbidden).toMatchObject({ code: 403, body: { reason: 'Forbidden', message: 'configmaps is forbidden: User "berth-standin" cannot list resource "configmaps" in API group "" in the namespace "rbac"' } });
    // The admin token (a test's own hand) is not limited.
    expect((await standinAdminClient(server, 'rbac').core.listNamespacedConfigMap({ namespace: 'rbac' })).items).toEqual([]);

    // The Role as it was before berth granted itself watch: berth's wait for its pod is refused.
    const unwatched = roleRules().map((r) => ({ ...r, verbs: r.resources.includes('pods') ? r.verbs.filter((v) => v !== 'watch') : r.verbs }));
    await using strict = await StandinApiServer.start({ rbac: unwatched });
    const input = sandboxInput('inst', { k: { namespace: 'rbac' } });
    const own = standinClient(strict, 'rbac');
    await createEphemeralPod(own, sandboxPod(input));
    const err = await waitForRunning(own, input.name, 30_000).then(() => undefined, (e: unknown) => e);
    expect(String((err as Error | undefined)?.message)).toMatch(/403|forbidden/i);
    await deletePod(own, input.name);
  });

  it('a create in a namespace that does not exist is 404 on the namespace; berth says so and names the fix instead of "not found"', async () => {
    await using only = await StandinApiServer.start({ namespaces: ['berth'] });
    const client = standinClient(only, 'absent');
    const input = sandboxInput('inst', { k: { namespace: 'absent' } });
    const err = await ensurePodSandbox(client, { ...input, knownName: undefined, unique: () => randomBytes(6).toString('hex') }).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).code).toBe('config_invalid');
    expect((err as Error).message).toBe(
      `kubernetes: could not create networkpolicy ${tenantPolicyName('inst', 'local', 'egress')}: namespace "absent" does not exist at ${only.url}; create it (kubectl create namespace absent, then deploy/README.md) or fix kubernetes.namespace`,
    );
  });

  it('at start-up, a sandbox pod is created as a dry run: a missing namespace or a LimitRange that refuses berth\'s pods is an error naming it and the fix; a quota used up right now only warns; nothing is stored', async () => {
    const check = async (srv: StandinApiServer, namespace: string, log?: Logger): Promise<unknown> => {
      const k = { ...KUBERNETES_DEFAULTS, namespace };
      return new KubernetesBackend({ installation: `inst-${randomBytes(3).toString('hex')}`, kubeConfig: srv.kubeConfig(namespace), sections: [k], ...(log === undefined ? {} : { log }) })
        .check(k).then(() => undefined, (e: unknown) => e);
    };
    await using only = await StandinApiServer.start({ namespaces: ['berth', 'small', 'full', 'tight'] });
    const missing = await check(only, 'absent');
    expect(missing).toBeInstanceOf(ConfigError);
    expect((missing as Error).message).toContain(`namespace "absent" does not exist at ${only.url}; create it (kubectl create namespace absent, then deploy/README.md) or fix kubernetes.namespace`);
    expect(await check(only, 'berth')).toBeUndefined();
    const admin = (ns: string) => standinAdminClient(only, ns);
    await admin('small').core.createNamespacedLimitRange({ namespace: 'small', body: { apiVersion: 'v1', kind: 'LimitRange', metadata: { name: 'tiny' }, spec: { limits: [{ type: 'Container', max: { cpu: '1' } }] } } });
    const refused = await check(only, 'small');
    expect((refused as { code?: string }).code).toBe('engine_refused');
    expect((refused as Error).message).toContain('maximum cpu usage per Container is 1, but limit is 2');
    expect((refused as Error).message).toContain('dryRun=All');
    // A quota no berth pod can ever fit under is an error; one that other pods use up right now only warns.
    const quota = (ns: string, cpu: string) => admin(ns).core.createNamespacedResourceQuota({ namespace: ns, body: { apiVersion: 'v1', kind: 'ResourceQuota', metadata: { name: 'cpu' }, spec: { hard: { 'limits.cpu': cpu } } } });
    await quota('tight', '1');
    expect((await check(only, 'tight') as Error).message).toContain('exceeded quota: cpu, requested: limits.cpu=2, used: limits.cpu=0, limited: limits.cpu=1');
    await quota('full', '3');
    const running = sandboxInput('inst', { k: { namespace: 'full' } });
    await runningPod(standinClient(only, 'full'), running);
    const said: string[] = [];
    expect(await check(only, 'full', new Logger((_ns: string, line: string) => void said.push(line), 'berth:test'))).toBeUndefined();
    expect(said.join('\n')).toContain('namespace "full" has no room for another sandbox pod right now');
    // The dry runs stored nothing: the one pod is the test's own.
    expect((await admin('full').core.listNamespacedPod({ namespace: 'full' })).items.map((p) => p.metadata!.name)).toEqual([running.name]);
    await deletePod(standinClient(only, 'full'), running.name);
    await waitForPodGone(standinClient(only, 'full'), running.name, 60_000);
    for (const ns of ['berth', 'small', 'tight']) expect((await admin(ns).core.listNamespacedPod({ namespace: ns })).items, ns).toEqual([]);
  });
});
