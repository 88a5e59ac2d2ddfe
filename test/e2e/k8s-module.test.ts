import { randomInt } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import type { Backend, SandboxSpec } from '../../src/backends/backend.js';
import { execOnceInPod } from '../../src/backends/kubernetes/exec-once.js';
import { deletePod } from '../../src/backends/kubernetes/pods.js';
import { CONTAINER_NAME, sandboxPodSpec } from '../../src/backends/kubernetes/manifests.js';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Broker } from '../../src/broker/broker.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthError } from '../../src/errors.js';
import { Logger } from '../../src/logging/logger.js';
import { runBerth } from '../helpers/cli.js';
import { waitNoneWithArg, waitSomeWithArg } from '../helpers/processes.js';
import { describeDocker, ensureImage, waitFor } from '../helpers/docker-e2e.js';
import { BerthOnStandin } from '../k8s-standin/berth-on-standin.js';
import { StandinApiServer } from '../k8s-standin/server.js';
import { KubernetesBackend } from '../../src/backends/kubernetes/kubernetes-backend.js';
import { sandboxInput, standinClient } from '../k8s-standin/fixtures.js';
import { egressCaConfigMap, ensureEgressCaConfigMap } from '../../src/backends/kubernetes/proxy-egress.js';
import { loadValidator } from '../schemas/validate.js';

/*
 * The kubernetes module beyond the conformance suite, through the stand-in: start-up checks
 * (an unreachable API server, missing permissions), mode agent-sandbox (Sandbox resources, and
 * SandboxClaims on a warm pool), and an exec stream the API server drops mid-session.
 */

/** agent-sandbox's claim controller as an operator configures it for berth (deploy/README.md), with the stand-in's default delays. */
const CLAIM_CONTROLLER = { allowedLabelDomains: ['berth.dev'], bindDelayMs: 300, podMetadataDelayMs: 300 };

describeDocker('kubernetes module (stand-in API server)', () => {
  let cluster: BerthOnStandin | undefined;
  const brokers: Broker[] = [];
  const backends: Backend[] = [];
  beforeAll(async () => {
    await ensureImage();
    cluster = await BerthOnStandin.start();
    Object.assign(cluster.server.claimController, CLAIM_CONTROLLER);
  }, 120_000);
  afterEach(async () => {
    for (const b of brokers.splice(0)) await b.close({ graceMs: 2_000 }).catch(() => undefined);
    for (const b of backends.splice(0)) await b.close().catch(() => undefined);
    c().server.denied.clear();
    Object.assign(c().server.claimController, CLAIM_CONTROLLER);
    await c().reset();
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
  }, 120_000);

  const c = (): BerthOnStandin => {
    if (cluster === undefined) throw new Error('the stand-in did not start');
    return cluster;
  };
  const configOf = (kubernetes: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) =>
    parseConfig({ backend: 'kubernetes', kubernetes: c().section(kubernetes), exec: { timeoutSeconds: 20 }, ...extra });

  const open = async (kubernetes: Record<string, unknown> = {}, extra: Record<string, unknown> = {}, lines: string[] = []): Promise<Broker> => {
    const broker = await Broker.open({ config: configOf(kubernetes, extra), berthHome: c().newHome(), env: { PATH: process.env['PATH'] }, log: (_ns, m) => void lines.push(m) });
    brokers.push(broker);
    return broker;
  };

  const backendOn = async (home: string, kubernetes: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Promise<{ backend: Backend; spec: (key: string, ephemeral: boolean) => SandboxSpec }> => {
    const store = StateStore.open(home);
    const installation = store.installationId;
    store.close();
    const config = configOf(kubernetes, extra);
    const backend = await BUILTIN_BACKENDS.module('kubernetes').create({ berthHome: home, installation, log: Logger.silent(), lease: (_n, fn) => fn(), places: [config.base.kubernetes] });
    backends.push(backend);
    const spec = (key: string, ephemeral: boolean): SandboxSpec => {
      const input = sandboxInput(installation, { key, ephemeral });
      return { identity: input.identity, digest: input.digest, dirName: `k-${input.digest.slice(0, 12)}`, ephemeral, mount: null, rule: 'auto:5', section: config.base.kubernetes };
    };
    return { backend, spec };
  };

  const errorOf = async (p: Promise<unknown>): Promise<BerthError> => {
    const err = await p.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    return err as BerthError;
  };

  // -- start-up -------------------------------------------------------------------------------

  it('check: passes when berth may do what it needs; a missing permission is backend_unavailable listing each one and the fix', async () => {
    const home = c().newHome();
    const { backend } = await backendOn(home);
    await backend.check(configOf().base.kubernetes);
    c().server.denied.add('create /pods/exec');
    c().server.denied.add('get /persistentvolumeclaims');
    const err = await errorOf(backend.check(configOf().base.kubernetes));
    expect(err.code).toBe('backend_unavailable');
    expect(err.message).toContain('berth may not create pods/exec, get persistentvolumeclaims in namespace "berth"');
    expect(err.message).toContain('apply deploy/rbac.yaml');
    // Mode agent-sandbox with a warm pool asks about Sandboxes and claims, not PVCs.
    c().server.denied.clear();
    c().server.denied.add('create extensions.agents.x-k8s.io/sandboxclaims');
    const agent = configOf({ mode: 'agent-sandbox', warmPool: 'pool' }, { persistent: false }).base.kubernetes;
    expect((await errorOf(backend.check(agent))).message).toContain('berth may not create extensions.agents.x-k8s.io/sandboxclaims');
  });

  it('check: sandboxes in egress mode allowlist also need create configmaps (berth\'s CA), which the stand-in refuses (403) when it is not granted', async () => {
    const home = c().newHome();
    const { backend } = await backendOn(home);
    const k = configOf().base.kubernetes;
    c().server.denied.add('create /configmaps');
    await backend.check(k);
    await backend.check(k, { mode: 'open' });
    const err = await errorOf(backend.check(k, { mode: 'allowlist' }));
    expect(err.code).toBe('backend_unavailable');
    expect(err.message).toContain('berth may not create configmaps in namespace "berth"');
    const pod = { metadata: { name: 'berth-pod-1', namespace: 'berth', uid: '0b5d3c52-8f3e-4d7e-9a4c-2f6f2f1d9a01' } };
    const map = egressCaConfigMap('inst', pod, { bundlePem: 'bundle', caPem: 'ca' });
    const refused = await errorOf(ensureEgressCaConfigMap(standinClient(c().server), map));
    expect(refused.message).toContain('could not create configmap berth-pod-1-egress-ca');
    expect(refused.message).toContain('(403 Forbidden)');
    c().server.denied.clear();
    await backend.check(k, { mode: 'allowlist' });
    await ensureEgressCaConfigMap(standinClient(c().server), map);
  });

  it('check: in mode agent-sandbox, an API server without the agent-sandbox CRDs is a start-up error naming the fix', async () => {
    const home = c().newHome();
    const { backend } = await backendOn(home, { mode: 'agent-sandbox' });
    await backend.check(configOf({ mode: 'agent-sandbox' }).base.kubernetes);
    await using bare = await StandinApiServer.start({ agentSandbox: false });
    const other = new KubernetesBackend({ installation: 'inst', kubeConfig: bare.kubeConfig('berth') });
    await other.check(configOf().base.kubernetes);
    const err = await errorOf(other.check(configOf({ mode: 'agent-sandbox', warmPool: 'py' }, { persistent: false }).base.kubernetes));
    expect(err.code).toBe('backend_unavailable');
    expect(err.message).toBe(`kubernetes: the API server at ${bare.url} does not serve sandboxes.agents.x-k8s.io/v1beta1; install kubernetes-sigs/agent-sandbox v0.5 (its CRDs and controller), or set kubernetes.mode: pods`);
  });

  it('the CLI against an API server that does not answer exits 125 with one line naming it; nothing falls back', async () => {
    const dead = createServer();
    await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve));
    const port = (dead.address() as { port: number }).port;
    await new Promise<void>((resolve) => dead.close(() => resolve()));
    const dir = c().newHome();
    const kubeconfig = join(dir, 'dead.kubeconfig');
    writeFileSync(kubeconfig, c().server.kubeConfig('berth').exportConfig().replace(c().server.url, `http://127.0.0.1:${port}`), { mode: 0o600 });
    writeFileSync(join(dir, 'berth.yaml'), `backend: kubernetes\nkubernetes:\n  kubeconfig: ${kubeconfig}\n`);
    const r = await runBerth(['exec', '--', 'echo', 'ran'], { cwd: dir, env: { PATH: process.env['PATH'], HOME: dir, BERTH_HOME: join(dir, 'home') }, timeoutMs: 45_000 });
    expect(r.code, r.stderr).toBe(125);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`the API server at http://127.0.0.1:${port} did not answer`);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  }, 60_000);

  it('the CLI with a kubeconfig that lacks the API server\'s CA exits 2 with one line naming the certificate and the fix; nothing falls back', async () => {
    const dir = c().newHome();
    const kubeconfig = join(dir, 'no-ca.kubeconfig');
    const kc = c().server.kubeConfig('berth');
    kc.clusters[0] = { ...kc.clusters[0]!, caData: undefined };
    writeFileSync(kubeconfig, kc.exportConfig(), { mode: 0o600 });
    writeFileSync(join(dir, 'berth.yaml'), `backend: kubernetes\nkubernetes:\n  kubeconfig: ${kubeconfig}\n`);
    const before = c().server.requests.total;
    const r = await runBerth(['exec', '--', 'echo', 'ran'], { cwd: dir, env: { PATH: process.env['PATH'], HOME: dir, BERTH_HOME: join(dir, 'home') }, timeoutMs: 45_000 });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`berth does not trust the TLS certificate of the API server at ${c().server.url} (UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate); give the kubeconfig's cluster the CA`);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(c().server.requests.total).toBe(before);
  }, 60_000);

  it('stop (idle): a persistent pod is deleted and its claim kept, listed as not running; started again it has its files and is not reported as recreated', async () => {
    const home = c().newHome();
    const { backend, spec } = await backendOn(home);
    const s = spec('idle-p', false);
    const first = await backend.ensure(s, undefined);
    await first.execOnce(['sh', '-c', 'echo kept > /workspace/f']);
    await backend.stop(first.ref);
    await expect(c().client.core.readNamespacedPod({ namespace: 'berth', name: first.name })).rejects.toMatchObject({ code: 404 });
    // Listed by its claim, stopped: berth ls says hibernated, and the orphan pass sees it.
    expect((await backend.listManaged()).filter((m) => m.ref === first.ref)).toEqual([expect.objectContaining({ running: false, ephemeral: false, digest: s.digest })]);
    const again = await backend.ensure(s, first.ref);
    expect([again.ref, again.recreated]).toEqual([first.ref, false]);
    expect((await again.execOnce(['cat', '/workspace/f'])).stdout.toString()).toBe('kept\n');
  });

  // -- agent-sandbox --------------------------------------------------------------------------

  it('agent-sandbox: a persistent identity is a Sandbox, created once and adopted by another process; listed as a Sandbox, never as its bare pod; removed with its pod and claim', async () => {
    const home = c().newHome();
    const k = { mode: 'agent-sandbox' };
    const [a, b] = [await backendOn(home, k), await backendOn(home, k)];
    const spec = a.spec('agent-p', false);
    const first = await a.backend.ensure(spec, undefined);
    expect(first.ref).toMatch(/^sandbox:berth\/berth-[0-9a-f]{24}$/);
    expect((await first.execOnce(['sh', '-c', 'echo kept > /workspace/f; id -u'])).stdout.toString()).toBe('1000\n');
    const again = await b.backend.ensure({ ...spec }, undefined);
    expect([again.ref, again.recreated]).toEqual([first.ref, false]);
    expect((await again.execOnce(['cat', '/workspace/f'])).stdout.toString()).toBe('kept\n');
    const listed = await b.backend.listManaged();
    expect(listed).toEqual([{ ref: first.ref, name: first.name, digest: spec.digest, ephemeral: false, running: true }]);
    await b.backend.remove(first.ref, undefined);
    await b.backend.remove(first.ref, undefined);
    expect(await b.backend.listManaged()).toEqual([]);
    expect((await c().client.core.listNamespacedPersistentVolumeClaim({ namespace: 'berth' })).items).toEqual([]);
    const fresh = await a.backend.ensure(spec, first.ref);
    expect(fresh.recreated).toBe(true);
    expect((await fresh.execOnce(['sh', '-c', 'cat /workspace/f 2>/dev/null || echo none'])).stdout.toString()).toBe('none\n');
  });

  it('agent-sandbox: a persistent Sandbox whose pod ended, or was deleted, runs the next call in a new pod from its controller, its files kept; the result says so', async () => {
    const broker = await open({ mode: 'agent-sandbox' }, { persistent: true });
    const s = { session: 'agent-ended' };
    expect((await broker.exec(s, 'echo kept > /workspace/f')).exitCode).toBe(0);
    const podOf = async (): Promise<{ name: string; uid: string }> => {
      const pods = (await c().client.core.listNamespacedPod({ namespace: 'berth', labelSelector: 'berth.dev/lifecycle=persistent' })).items;
      expect(pods).toHaveLength(1);
      return { name: pods[0]!.metadata!.name!, uid: pods[0]!.metadata!.uid! };
    };
    const first = await podOf();
    // The pod's container ends behind berth's back (restartPolicy Never: it never runs again).
    await c().server.killPodContainer('berth', first.name);
    const afterEnd = await broker.exec(s, 'cat /workspace/f');
    expect(afterEnd, afterEnd.output).toMatchObject({ exitCode: 0, stdout: 'kept\n', sandboxRecreated: true });
    const second = await podOf();
    expect(second.uid).not.toBe(first.uid);
    // Deleted (kubectl delete pod): the controller makes it again, and the next call runs there.
    await deletePod(c().client, second.name);
    const running = async (): Promise<boolean> => {
      const pod = await c().client.core.readNamespacedPod({ namespace: 'berth', name: second.name }).catch(() => undefined);
      return pod !== undefined && pod.metadata!.uid !== second.uid && pod.status?.phase === 'Running';
    };
    expect(await waitFor(running, 30_000)).toBe(true);
    const afterDelete = await broker.exec(s, 'cat /workspace/f');
    expect(afterDelete, afterDelete.output).toMatchObject({ exitCode: 0, stdout: 'kept\n' });
    expect(afterDelete.sandboxRecreated === true || afterDelete.shellReplaced === true, afterDelete.output).toBe(true);
  });

  it('agent-sandbox: an ephemeral Sandbox whose pod ended is replaced by a new one (its files went with the pod), reported as recreated', async () => {
    const { backend, spec } = await backendOn(c().newHome(), { mode: 'agent-sandbox' });
    const s = spec('session:agent-e-ended', true);
    const first = await backend.ensure(s, undefined);
    await c().server.killPodContainer('berth', first.name);
    const next = await backend.ensure(s, first.ref);
    expect(next.ref).not.toBe(first.ref);
    expect(next.recreated).toBe(true);
    expect((await next.execOnce(['echo', 'ran'])).stdout.toString()).toBe('ran\n');
    expect((await backend.listManaged()).map((m) => m.ref)).toEqual([next.ref]);
  });

  it('agent-sandbox without a warm pool: an ephemeral identity gets a new Sandbox, found again only by its recorded ref', async () => {
    const home = c().newHome();
    const { backend, spec } = await backendOn(home, { mode: 'agent-sandbox' });
    const s = spec('session:agent-e', true);
    const first = await backend.ensure(s, undefined);
    expect(first.ref).toMatch(/^sandbox:berth\/berth-[0-9a-f]{16}-[0-9a-f]{12}$/);
    const reattached = await backend.ensure(s, first.ref);
    expect([reattached.ref, reattached.recreated]).toEqual([first.ref, false]);
    const other = await backend.ensure(s, undefined);
    expect(other.ref).not.toBe(first.ref);
    expect((await backend.listManaged()).map((m) => [m.ref, m.ephemeral]).sort()).toEqual([[first.ref, true], [other.ref, true]].sort());
  });

  /** A SandboxTemplate of berth's pod spec and a SandboxWarmPool `py` of one replica on it, valid against the CRDs; the pre-made Sandbox's name. */
  const warmPool = async (image?: string): Promise<string> => {
    const validator = loadValidator();
    const template = {
      apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxTemplate', metadata: { name: 'berth-sandbox', namespace: 'berth' },
      spec: { podTemplate: { spec: sandboxPodSpec(sandboxInput('template', { ephemeral: true, ...(image === undefined ? {} : { k: { image } }) })) } },
    };
    const pool = { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxWarmPool', metadata: { name: 'py', namespace: 'berth' }, spec: { replicas: 1, sandboxTemplateRef: { name: 'berth-sandbox' } } };
    validator.assertValid(template);
    validator.assertValid(pool);
    const create = (plural: string, body: object) =>
      c().client.custom.createNamespacedCustomObject({ group: 'extensions.agents.x-k8s.io', version: 'v1beta1', namespace: 'berth', plural, body, fieldValidation: 'Strict' });
    await create('sandboxtemplates', template);
    await create('sandboxwarmpools', pool);
    const premade = (await c().client.custom.listNamespacedCustomObject({ group: 'agents.x-k8s.io', version: 'v1beta1', namespace: 'berth', plural: 'sandboxes' })) as { items: { metadata: { name: string } }[] };
    expect(premade.items.map((s) => s.metadata.name)).toEqual([expect.stringMatching(/^py-/)]);
    return premade.items[0]!.metadata.name;
  };
  const claimsLeft = async (): Promise<object[]> =>
    ((await c().client.custom.listNamespacedCustomObject({ group: 'extensions.agents.x-k8s.io', version: 'v1beta1', namespace: 'berth', plural: 'sandboxclaims' })) as { items: object[] }).items;

  it('agent-sandbox with a warm pool: the controller binds the claim late and copies the labels later still; the session waits for both, runs in the pre-made pod under the tenant\'s NetworkPolicy, and its close deletes the claim and the Sandbox', async () => {
    const validator = loadValidator();
    const warm = await warmPool();
    // Longer than a single look would wait: berth must wait for the labels, not check once.
    c().server.claimController.bindDelayMs = 700;
    c().server.claimController.podMetadataDelayMs = 1_500;

    const broker = await open({ mode: 'agent-sandbox', warmPool: 'py' }, { persistent: false });
    const s = { session: 'claimed' };
    const r = await broker.exec(s, 'id -u; echo mine > /workspace/mark');
    expect(r).toMatchObject({ exitCode: 0, stdout: '1000\n' });
    const claims = (await claimsLeft()) as { metadata: { name: string; labels: object } }[];
    expect(claims).toHaveLength(1);
    validator.assertValid({ ...claims[0], status: undefined, metadata: { name: claims[0]!.metadata.name, labels: claims[0]!.metadata.labels } });
    // The command ran in the pre-made Sandbox's pod, which now carries this identity's labels.
    expect((await execOnceInPod({ client: c().client, pod: warm, container: CONTAINER_NAME }, ['cat', '/workspace/mark'])).stdout.toString()).toBe('mine\n');
    const pod = await c().client.core.readNamespacedPod({ namespace: 'berth', name: warm });
    expect(pod.metadata?.labels?.['berth.dev/lifecycle']).toBe('ephemeral');
    // The tenant's NetworkPolicy exists and selects the pool pod.
    const policies = (await c().client.networking.listNamespacedNetworkPolicy({ namespace: 'berth' })).items;
    expect(policies.filter((np) => Object.entries(np.spec!.podSelector!.matchLabels ?? {}).every(([k, v]) => pod.metadata?.labels?.[k] === v)).map((np) => np.metadata!.name))
      .toEqual([expect.stringMatching(/-egress$/)]);
    // The pool was filled again.
    const after = (await c().client.custom.listNamespacedCustomObject({ group: 'agents.x-k8s.io', version: 'v1beta1', namespace: 'berth', plural: 'sandboxes', labelSelector: 'agents.x-k8s.io/warm-pool=py' })) as { items: object[] };
    expect(after.items).toHaveLength(1);

    expect(await broker.removeSandboxOf(s)).toBe(true);
    await expect(c().client.core.readNamespacedPod({ namespace: 'berth', name: warm })).rejects.toMatchObject({ code: 404 });
    expect(await claimsLeft()).toEqual([]);
  });

  it('agent-sandbox with a warm pool: a claimed pod that ended, or was deleted, is replaced by a new claim on the pool, reported as recreated', async () => {
    await warmPool();
    const { backend, spec } = await backendOn(c().newHome(), { mode: 'agent-sandbox', warmPool: 'py' }, { persistent: false });
    const s = spec('session:claim-ended', true);
    const first = await backend.ensure(s, undefined);
    await c().server.killPodContainer('berth', first.name);
    const afterEnd = await backend.ensure(s, first.ref);
    expect(afterEnd.ref).not.toBe(first.ref);
    expect(afterEnd.recreated).toBe(true);
    expect((await afterEnd.execOnce(['echo', 'ran'])).stdout.toString()).toBe('ran\n');
    // Deleted (kubectl delete pod): its Sandbox's controller may make a pod again, but not the claimed one.
    await deletePod(c().client, afterEnd.name);
    const afterDelete = await backend.ensure(s, afterEnd.ref);
    expect(afterDelete.ref).not.toBe(afterEnd.ref);
    expect(afterDelete.recreated).toBe(true);
    expect((await afterDelete.execOnce(['echo', 'ran'])).stdout.toString()).toBe('ran\n');
    // The replaced claims are gone; only the last one is left.
    expect((await claimsLeft()).map((cl) => (cl as { metadata: { name: string } }).metadata.name)).toEqual([afterDelete.ref.split('/').pop()]);
  });

  it('an image that fails to pull fails a Sandbox or a warm-pool claim within kubernetes.imagePullTimeoutSeconds, naming the image, as a plain pod does', async () => {
    // On a .invalid registry the stand-in's kubelet fails every pull ("no such host"), retried after 10 s.
    const image = 'registry.invalid/berth-sandbox:1';
    const waits = { imagePullTimeoutSeconds: 2, podStartTimeoutSeconds: 30 };
    const plain = await backendOn(c().newHome(), { mode: 'agent-sandbox', image, ...waits }, { persistent: false });
    const ephemeral = await errorOf(plain.backend.ensure(plain.spec('session:pull-sandbox', true), undefined));
    expect([ephemeral.code, ephemeral.message]).toEqual(['image_pull_failed', expect.stringContaining(`image "${image}" could not be pulled for 2 s`)]);
    await warmPool(image);
    const pooled = await backendOn(c().newHome(), { mode: 'agent-sandbox', warmPool: 'py', ...waits }, { persistent: false });
    const claimed = await errorOf(pooled.backend.ensure(pooled.spec('session:pull-claim', true), undefined));
    expect([claimed.code, claimed.message]).toEqual(['image_pull_failed', expect.stringContaining(`image "${image}" could not be pulled for 2 s`)]);
    expect(await claimsLeft()).toEqual([]);
  });

  it('a claim the controller refuses (berth\'s label domain not on its allowlist) fails at once with the controller\'s reason and the fix, leaving no claim', async () => {
    await warmPool();
    c().server.claimController.allowedLabelDomains = ['sandbox.users.io'];
    const home = c().newHome();
    const { backend, spec } = await backendOn(home, { mode: 'agent-sandbox', warmPool: 'py', podStartTimeoutSeconds: 30 }, { persistent: false });
    const started = Date.now();
    const err = await errorOf(backend.ensure(spec('session:refused', true), undefined));
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(err.code).toBe('backend_unavailable');
    expect(err.message).toMatch(/cannot be bound: the controller says InvalidMetadata: invalid additionalPodMetadata: failed to validate label "berth\.dev\/[a-z]+": label domain "berth\.dev" is not in the allowlist; add berth\.dev to the agent-sandbox controller's allowed label domains/);
    expect(await claimsLeft()).toEqual([]);
  });

  it('a claim on a pool that does not exist fails at once with the controller\'s reason; one never bound times out saying what the controller last said, leaving no claim', async () => {
    const home = c().newHome();
    const { backend, spec } = await backendOn(home, { mode: 'agent-sandbox', warmPool: 'none-here', podStartTimeoutSeconds: 30 }, { persistent: false });
    const err = await errorOf(backend.ensure(spec('session:unbound', true), undefined));
    expect(err.code).toBe('backend_unavailable');
    expect(err.message).toContain('cannot be bound: the controller says WarmPoolNotFound: SandboxWarmPool "none-here" not found; create the SandboxWarmPool or fix kubernetes.warmPool');
    expect(await claimsLeft()).toEqual([]);
    // The controller has not looked at the claim yet when the deadline comes.
    c().server.claimController.bindDelayMs = 5_000;
    const slow = await backendOn(home, { mode: 'agent-sandbox', warmPool: 'none-here', podStartTimeoutSeconds: 1 }, { persistent: false });
    const late = await errorOf(slow.backend.ensure(slow.spec('session:late', true), undefined));
    expect(late.code).toBe('timeout');
    expect(late.message).toContain('was not bound to a sandbox within 1 s (the controller has not reported on it)');
    expect(await claimsLeft()).toEqual([]);
  });

  // -- the exec stream ------------------------------------------------------------------------

  it('an exec stream the API server drops between commands is re-opened: the next command runs on a new shell, the session\'s files still there', async () => {
    const lines: string[] = [];
    const broker = await open({}, { persistent: false }, lines);
    const s = { session: 'dropped' };
    expect((await broker.exec(s, 'echo before > f')).exitCode).toBe(0);
    const execs = c().server.execRequests.length;
    c().server.dropExecConnections();
    // berth has seen the drop once each dropped process was ended in the pod (on a cluster, long before the next command).
    const count = (text: string): number => lines.filter((l) => l.includes(text)).length;
    expect(await waitFor(() => count('ended the process of the dropped exec stream') >= 1 && count('ended the process of the dropped') === count('dropped ('), 30_000)).toBe(true);
    const r = await broker.exec(s, 'cat f');
    expect(r, r.output).toMatchObject({ exitCode: 0, stdout: 'before\n', shellReplaced: true });
    expect(c().server.execRequests.length).toBeGreaterThan(execs);
    expect((await broker.exec(s, 'echo after')).stdout).toBe('after\n');
  });

  it('a stream dropped while a command runs: that command reports the lost shell (nothing more of it runs), and the next command works', async () => {
    const broker = await open({}, { persistent: false });
    const s = { session: 'dropped-mid' };
    expect((await broker.exec(s, 'true')).exitCode).toBe(0);
    const m = String(randomInt(1_000_000, 9_000_000));
    const running = broker.exec(s, `sleep ${m}; touch ran-on`);
    expect(await waitSomeWithArg(m)).toHaveLength(1);
    c().server.dropExecConnections();
    const r = await running;
    expect(r.exitCode).toBe(125);
    expect(r.stderr).toContain('berth: the shell ended unexpectedly');
    expect(await waitNoneWithArg(m)).toEqual([]);
    const next = await broker.exec(s, 'test -e ran-on && echo ran-on || echo not-run');
    expect(next).toMatchObject({ exitCode: 0, stdout: 'not-run\n' });
  });
});
