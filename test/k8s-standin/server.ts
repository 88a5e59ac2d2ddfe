import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig, type V1Pod, type V1PodSpec } from '@kubernetes/client-node';
import Dockerode from 'dockerode';
import { WebSocketServer, type WebSocket } from 'ws';
import { TEST_IMAGE } from '../helpers/docker.js';
import { loadValidator, type ManifestValidator } from '../schemas/validate.js';
import { bridgeExec, type ExecBridge } from './exec-bridge.js';
import { parseFieldSelector } from './field-selector.js';
import { FlowControl, type FlowControlOptions } from './flow-control.js';
import { pullImage, type ImagePullOptions } from './image-pulls.js';
import { parseLabelSelector } from './label-selector.js';
import { restrictedViolations } from './pod-security.js';
import { applyLimitRanges, quotaRefusal, type LimitRangeItem } from './quota-admission.js';
import { podGone, reconcileSandbox, sandboxStatus, type ControllerHost } from './sandbox-controller.js';
import { UPSTREAM_DEFAULT_LABEL_DOMAINS } from './claim-metadata.js';
import { claimStatus, fillPool, reconcileClaim, type ClaimControllerOptions } from './warm-pool-controller.js';
import { claimDir, containerOptions, runningStatus, STANDIN_LABEL, terminatedStatus, waitingStatus, type PodRuntimeOptions } from './pod-runtime.js';
import { storedNetworkPolicy } from './network-policy-storage.js';
import { alreadyExists, apiError, notFound, type StatusBody } from './status.js';
import { rbacAllows, roleRules, type RoleRule } from './rbac.js';
import { makeStandinTls, type StandinTls } from './test-ca.js';
import { WatchHub } from './watch-hub.js';

/*
 * A stand-in Kubernetes API server for tests (README.md): the REST calls berth makes and the
 * pods/exec WebSocket, on loopback, each pod a real local Docker container. Driven by the real
 * @kubernetes/client-node through `kubeConfig()`.
 */

export interface StandinOptions {
  docker?: Dockerode;
  /** Exec subprotocols offered, in the server's order (default v5, then v4). */
  protocols?: readonly string[];
  /** Bearer token berth's requests carry (its kubeconfig's). */
  token?: string;
  /**
   * What berth's token may do, as RBAC rules: default the Role of deploy/rbac.yaml (rbac.ts), as a
   * cluster an operator applied it to; false: everything (only for tests of the stand-in itself).
   * The admin token (`kubeConfig(ns, { admin: true })`, tests' own fixtures) may do everything.
   */
  rbac?: readonly RoleRule[] | false;
  /**
   * Default true: HTTPS and `wss` with a certificate from a CA made for this server, which the
   * kubeconfig carries as `certificate-authority-data`, as a cluster's does. False: plain HTTP
   * and `ws`, only to measure what TLS costs (measure.ts).
   */
  tls?: boolean;
  imageFor?: (image: string) => string;
  podPidsLimit?: number;
  /** Refuse pods that break Pod Security "restricted" (our transcription, pod-security.ts), as a namespace enforcing it would. Default true. */
  enforceRestricted?: boolean;
  /**
   * The claim controller's label domain allowlist, as an operator configures it (default: the
   * controller's own, `sandbox.users.io`, which admits none of berth's labels).
   */
  allowedLabelDomains?: readonly string[];
  /** False: agent-sandbox's CRDs are not installed (its resources answer 404). Default true. */
  agentSandbox?: boolean;
  /** The namespaces that exist (a create elsewhere is 404, as for a missing namespace); default: every one. */
  namespaces?: readonly string[];
  /** From a claim's creation to its binding. Default 300 ms. */
  claimBindDelayMs?: number;
  /** From a claim's binding to its metadata on the pod. Default 300 ms. */
  claimPodMetadataDelayMs?: number;
  /**
   * The Docker network pods join (default `none`: no network). NetworkPolicies are never enforced:
   * a test that gives pods a network checks the policy objects berth writes, not the traffic they would stop.
   */
  podNetwork?: string;
  /** API server flow control: 429 with Retry-After past a per-client budget. Default: none. */
  flowControl?: FlowControlOptions;
  /** Changes a watch can still resume from; older resourceVersions are 410 Gone. Default 10,000. */
  watchHistory?: number;
  /** Between BOOKMARK events of a watch that allows them. Default 1 s (a real server: about a minute). */
  bookmarkIntervalMs?: number;
  /** Which images fail to pull, and the kubelet's pull back-off. Default: only images on a `.invalid` registry fail, back-off 10 s. */
  imagePulls?: Partial<ImagePullOptions>;
}

/** What the stand-in received, by verb (`get`, `list`, `watch`, `create`, `delete`, `exec`, ...), as an audit log counts it. */
export interface RequestCounts {
  total: number;
  /** TCP connections accepted (over HTTPS, each one a TLS handshake): what a client's keep-alive saves. */
  connections: number;
  /** Turned away by flow control (429). */
  rejected: number;
  byVerb: Record<string, number>;
}

type Obj = Record<string, unknown> & { metadata: Record<string, unknown> };

interface Resource {
  /** Path segment (`pods`), kind, list kind, group/version prefix. */
  plural: string;
  kind: string;
  prefix: string;
  /** False: no vendored schema (the stand-in stores it as sent). */
  schema?: false;
}

const RESOURCES: Resource[] = [
  { plural: 'pods', kind: 'Pod', prefix: '/api/v1' },
  { plural: 'persistentvolumeclaims', kind: 'PersistentVolumeClaim', prefix: '/api/v1' },
  { plural: 'resourcequotas', kind: 'ResourceQuota', prefix: '/api/v1', schema: false },
  { plural: 'limitranges', kind: 'LimitRange', prefix: '/api/v1', schema: false },
  { plural: 'configmaps', kind: 'ConfigMap', prefix: '/api/v1', schema: false },
  { plural: 'networkpolicies', kind: 'NetworkPolicy', prefix: '/apis/networking.k8s.io/v1' },
  { plural: 'sandboxes', kind: 'Sandbox', prefix: '/apis/agents.x-k8s.io/v1beta1' },
  { plural: 'sandboxclaims', kind: 'SandboxClaim', prefix: '/apis/extensions.agents.x-k8s.io/v1beta1' },
  { plural: 'sandboxwarmpools', kind: 'SandboxWarmPool', prefix: '/apis/extensions.agents.x-k8s.io/v1beta1' },
  { plural: 'sandboxtemplates', kind: 'SandboxTemplate', prefix: '/apis/extensions.agents.x-k8s.io/v1beta1' },
];

const ACCESS_REVIEW_PATH = '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews';

const PATH_RE = /^(\/api\/v1|\/apis\/[^/]+\/[^/]+)\/namespaces\/([^/]+)\/([^/]+)(?:\/([^/]+))?(?:\/(exec))?$/;

export class StandinApiServer implements AsyncDisposable {
  readonly instance = randomBytes(6).toString('hex');
  readonly token: string;
  /** A token that may do everything: tests' own fixtures (templates, pools, quotas), as a cluster admin's. */
  readonly adminToken: string;
  /** What berth's token may do (undefined: everything). */
  private readonly rbac: readonly RoleRule[] | undefined;
  /** Containers started for pods, by `namespace/name`. */
  readonly containers = new Map<string, string>();
  /** Every exec request's URL as received (what an API server's audit log records). */
  readonly execRequests: string[] = [];
  /**
   * Permissions berth's token lacks besides what its Role leaves out, as `verb group/resource` (`create /pods`, `get /pods/exec`):
   * SelfSubjectAccessReviews answer accordingly, and a REST call it names is 403 Forbidden (exec
   * upgrades are not checked).
   */
  readonly denied = new Set<string>();
  private readonly objects = new Map<string, Map<string, Obj>>();
  private readonly bridges = new Set<ExecBridge>();
  private readonly sockets = new Set<import('node:net').Socket>();
  private readonly runtime: PodRuntimeOptions;
  private readonly wss: WebSocketServer;
  private readonly protocols: readonly string[];
  private readonly enforceRestricted: boolean;
  private readonly namespaces: readonly string[] | undefined;
  private readonly agentSandbox: boolean;
  private readonly pending = new Set<Promise<unknown>>();
  /** Pods being deleted (namespace/name): what the deletion waits on now, for a test's message when one takes long. */
  readonly terminating = new Map<string, string>();
  private readonly timers = new Set<NodeJS.Timeout>();
  /** A mutating admission webhook for NetworkPolicies (create and update): it may change one before it is stored. */
  mutateNetworkPolicy: ((policy: Record<string, unknown>) => void) | undefined;
  /** The claim controller sketch's settings; a test may change them (its allowlist, say) between claims. */
  readonly claimController: ClaimControllerOptions;
  readonly requests: RequestCounts = { total: 0, connections: 0, rejected: 0, byVerb: {} };
  /** Open watches, and the changes they resume from. */
  readonly watches: WatchHub;
  private readonly flow: FlowControl | undefined;
  private readonly imagePulls: ImagePullOptions;
  private dockerEvents: NodeJS.ReadableStream | undefined;
  private readonly stopping = new AbortController();
  /** The last resourceVersion given out. */
  private resourceVersion = 1;
  private server: Server | undefined;
  /** The CA and serving certificate, or undefined when serving plain HTTP. */
  private tls: StandinTls | undefined;
  private validator: ManifestValidator | undefined;
  private port = 0;

  private constructor(opts: StandinOptions, readonly docker: Dockerode, private readonly dataDir: string) {
    this.token = opts.token ?? randomBytes(16).toString('hex');
    this.adminToken = randomBytes(16).toString('hex');
    this.rbac = opts.rbac === false ? undefined : opts.rbac ?? roleRules();
    this.protocols = opts.protocols ?? ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
    this.enforceRestricted = opts.enforceRestricted ?? true;
    this.namespaces = opts.namespaces;
    this.agentSandbox = opts.agentSandbox ?? true;
    this.claimController = {
      allowedLabelDomains: opts.allowedLabelDomains ?? UPSTREAM_DEFAULT_LABEL_DOMAINS,
      bindDelayMs: opts.claimBindDelayMs ?? 300,
      podMetadataDelayMs: opts.claimPodMetadataDelayMs ?? 300,
    };
    this.flow = opts.flowControl === undefined ? undefined : new FlowControl(opts.flowControl);
    this.watches = new WatchHub(opts.watchHistory ?? 10_000, opts.bookmarkIntervalMs ?? 1000, () => this.resourceVersion);
    this.imagePulls = { fails: (image) => (/^[^/]+\.invalid\//.test(image) ? `dial tcp: lookup ${image.split('/')[0]!}: no such host` : undefined), backoffMs: 10_000, ...opts.imagePulls };
    this.runtime = {
      docker,
      instance: this.instance,
      dataDir,
      imageFor: opts.imageFor ?? (() => TEST_IMAGE),
      podPidsLimit: opts.podPidsLimit ?? 1024,
      network: opts.podNetwork ?? 'none',
      configMap: (namespace, name) => (this.store('configmaps').get(`${namespace}/${name}`)?.['data'] as Record<string, string> | undefined),
    };
    this.wss = new WebSocketServer({
      noServer: true,
      // The client's first offered protocol that the server supports, as x/net/websocket picks it.
      handleProtocols: (offered) => [...offered].find((p) => this.protocols.includes(p)) ?? false,
    });
  }

  static async start(opts: StandinOptions = {}): Promise<StandinApiServer> {
    const s = new StandinApiServer(opts, opts.docker ?? new Dockerode(), mkdtempSync(join(tmpdir(), 'berth-k8s-standin-')));
    s.validator = loadValidator();
    // Compile the schemas now, so the first create does not pay for it (measurements time creates).
    for (const kind of ['Pod', 'PersistentVolumeClaim']) s.validator.errors({ apiVersion: 'v1', kind, metadata: { name: 'warm-up' } });
    s.validator.errors({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'warm-up' } });
    const handler: RequestListener = (req, res) => {
      s.track(s.handle(req, res).catch((err: unknown) => s.reply(res, 500, apiError(500, 'InternalError', (err as Error).message))));
    };
    if (opts.tls !== false) s.tls = await makeStandinTls();
    const server = s.tls === undefined ? createServer(handler) : createTlsServer({ cert: s.tls.certPem, key: s.tls.keyPem }, handler);
    // Plain TCP connections, so that stop() can cut those still in their TLS handshake too.
    server.on('connection', (sock: import('node:net').Socket) => {
      s.requests.connections++;
      s.sockets.add(sock);
      sock.once('close', () => s.sockets.delete(sock));
    });
    server.on('upgrade', (req, sock, head) => s.upgrade(req, sock as import('node:net').Socket, head));
    await s.followContainerDeaths();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    s.server = server;
    s.port = (server.address() as AddressInfo).port;
    return s;
  }

  get url(): string {
    return `${this.tls === undefined ? 'http' : 'https'}://127.0.0.1:${this.port}`;
  }

  /** The CA that signed the server's certificate (PEM), or undefined when serving plain HTTP. */
  get caPem(): string | undefined {
    return this.tls?.caPem;
  }

  /**
   * A KubeConfig for the real client: this server, its CA as `certificate-authority-data`, its
   * token, `namespace` as the context's.
   */
  kubeConfig(namespace = 'berth', as: { admin?: boolean } = {}): KubeConfig {
    const kc = new KubeConfig();
    // Over plain HTTP the client insists on skipTLSVerify ("HTTP protocol is not allowed when skipTLSVerify is not set").
    const ca = this.tls === undefined ? { skipTLSVerify: true } : { caData: Buffer.from(this.tls.caPem).toString('base64') };
    kc.loadFromOptions({
      clusters: [{ name: 'standin', server: this.url, ...ca }],
      users: [{ name: 'berth', token: as.admin === true ? this.adminToken : this.token }],
      contexts: [{ name: 'standin', cluster: 'standin', user: 'berth', namespace }],
      currentContext: 'standin',
    });
    return kc;
  }

  /**
   * A raw request to this server (trusting its CA) with its token unless `headers` sets
   * `authorization`: for tests that send what the typed clients would not.
   */
  async fetch(path: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Response> {
    const url = new URL(path, this.url);
    const headers = { authorization: `Bearer ${this.token}`, ...init.headers };
    return new Promise<Response>((resolve, reject) => {
      const send = this.tls === undefined ? httpRequest : httpsRequest;
      const req = send(url, { method: init.method ?? 'GET', headers, ...(this.tls === undefined ? {} : { ca: this.tls.caPem }) }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.once('error', reject);
        res.once('end', () => {
          const out = new Headers();
          for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) out.set(k, Array.isArray(v) ? v.join(', ') : v);
          resolve(new Response(res.statusCode === 204 ? null : Buffer.concat(chunks), { status: res.statusCode ?? 0, headers: out }));
        });
      });
      req.once('error', reject);
      req.end(init.body);
    });
  }

  /** Every exec connection stops answering (no data, no pongs) without closing: a half-open TCP connection. */
  freezeExecConnections(): void {
    for (const b of this.bridges) b.freeze();
  }

  /** Sends a raw message on every exec connection (a misbehaving server). */
  sendToExecClients(data: Buffer): void {
    for (const b of this.bridges) b.sendRaw(data);
  }

  /** Every exec connection is cut without a status frame (an API server or kubelet restart). */
  dropExecConnections(): void {
    for (const b of this.bridges) b.drop();
  }

  /** Forgets every change so far (etcd compaction): a watch from an older resourceVersion gets 410 Gone and must list again. */
  compactWatchHistory(): void {
    this.watches.compact();
  }

  /** Remove a pod's container behind the API's back (a node lost it); the pod shows Failed. */
  async killPodContainer(namespace: string, name: string): Promise<void> {
    const id = this.containers.get(`${namespace}/${name}`);
    if (id !== undefined) await this.docker.getContainer(id).kill().catch(() => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Stops serving and removes every container this server started. Idempotent. */
  async stop(): Promise<void> {
    this.stopping.abort();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.watches.endAll();
    (this.dockerEvents as { destroy?: () => void } | undefined)?.destroy?.();
    for (const b of this.bridges) b.drop();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server === undefined ? resolve() : this.server.close(() => resolve())));
    this.server = undefined;
    await Promise.allSettled([...this.pending]);
    const list = await this.docker.listContainers({ all: true, filters: { label: [`${STANDIN_LABEL}=${this.instance}`] } });
    await Promise.allSettled(list.map((c) => this.docker.getContainer(c.Id).remove({ force: true })));
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  private track<T>(p: Promise<T>): void {
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  private store(plural: string): Map<string, Obj> {
    let m = this.objects.get(plural);
    if (m === undefined) {
      m = new Map();
      this.objects.set(plural, m);
    }
    return m;
  }

  private authorized(req: IncomingMessage): boolean {
    return req.headers.authorization === `Bearer ${this.token}` || req.headers.authorization === `Bearer ${this.adminToken}`;
  }

  /**
   * Whether the caller may `verb` on `group/resource` (`/pods/exec`): the admin token may do
   * anything; berth's token what its Role grants, less what a test denied.
   */
  private allows(req: IncomingMessage, verb: string, group: string, resource: string): boolean {
    if (req.headers.authorization === `Bearer ${this.adminToken}`) return true;
    return (this.rbac === undefined || rbacAllows(this.rbac, verb, group, resource)) && !this.denied.has(`${verb} ${group}/${resource}`);
  }

  private reply(res: ServerResponse, code: number, body: unknown): void {
    if (res.headersSent) return;
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  /** Counts a request by verb; false (and a 429 sent) when flow control turns it away. */
  private admit(req: IncomingMessage, res: ServerResponse, verb: string): boolean {
    this.requests.total++;
    this.requests.byVerb[verb] = (this.requests.byVerb[verb] ?? 0) + 1;
    if (this.flow === undefined || this.flow.admit(req.headers.authorization ?? '')) return true;
    this.requests.rejected++;
    const after = this.flow.opts.retryAfterSeconds ?? 1;
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(after) });
    res.end(JSON.stringify(apiError(429, 'TooManyRequests', 'Too many requests, please try again later.', { retryAfterSeconds: after } as StatusBody['details'])));
    return false;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!this.authorized(req)) return this.reply(res, 401, apiError(401, 'Unauthorized', 'Unauthorized'));
    const url = new URL(req.url ?? '/', this.url);
    if (!this.admit(req, res, verbOf(req.method ?? '', url))) return;
    if (url.pathname === '/version') return this.reply(res, 200, { major: '1', minor: '35', gitVersion: 'v1.35.0-berth-standin' });
    if (req.method === 'POST' && url.pathname === ACCESS_REVIEW_PATH) return this.reviewAccess(req, res, await readJson(req));
    const m = PATH_RE.exec(url.pathname);
    const resource = m === null ? undefined : RESOURCES.find((r) => r.prefix === m[1] && r.plural === m[3] && (this.agentSandbox || !r.prefix.includes('agents.x-k8s.io')));
    if (m === null || resource === undefined || m[5] !== undefined) {
      return this.reply(res, 404, apiError(404, 'NotFound', `the server could not find the requested resource (${req.method} ${url.pathname})`));
    }
    const namespace = m[2] as string;
    const name = m[4];
    // Authorization comes before decoding and admission, as on a real API server.
    const verb = req.method === 'PUT' ? 'update' : verbOf(req.method ?? '', url);
    const group = m[1] === '/api/v1' ? '' : (m[1] as string).split('/')[2] as string;
    if (!this.allows(req, verb, group, resource.plural)) {
      return this.reply(res, 403, apiError(403, 'Forbidden',
        `${resource.plural}${name === undefined ? '' : ` "${name}"`} is forbidden: User "berth-standin" cannot ${verb} resource "${resource.plural}" in API group "${group}" in the namespace "${namespace}"`,
        { ...(name === undefined ? {} : { name }), kind: resource.plural } as StatusBody['details']));
    }
    if (req.method === 'POST' && name === undefined) {
      const dryRun = url.searchParams.getAll('dryRun');
      if (dryRun.some((d) => d !== 'All')) return this.reply(res, 400, apiError(400, 'BadRequest', `Invalid dry run value: ${JSON.stringify(dryRun)}; the only one is All`));
      return this.create(res, resource, namespace, await readJson(req), url.searchParams.get('fieldValidation'), dryRun.length > 0);
    }
    if (req.method === 'GET' && name === undefined && ['1', 'true'].includes(url.searchParams.get('watch') ?? '')) return this.watch(res, resource, namespace, url.searchParams);
    if (req.method === 'GET' && name === undefined) return this.list(res, resource, namespace, url.searchParams);
    if (req.method === 'GET' && name !== undefined) return this.get(res, resource, namespace, name);
    if (req.method === 'PUT' && name !== undefined && resource.plural === 'networkpolicies') return this.replace(res, resource, namespace, name, await readJson(req), url.searchParams.get('fieldValidation'));
    if (req.method === 'DELETE' && name !== undefined) return this.remove(res, resource, namespace, name);
    return this.reply(res, 405, apiError(405, 'MethodNotAllowed', `${req.method} is not supported on ${url.pathname}`));
  }

  /**
   * Why a written object is refused before it is stored, or undefined: a real API server decodes
   * first (an unknown field is a 400 under Strict, and silently dropped otherwise, which the
   * stand-in refuses too, so a berth that stops asking for Strict fails here), then validates (422).
   */
  private decodeRefusal(r: Resource, obj: Obj, fieldValidation: string | null): [number, StatusBody] | undefined {
    const errors = r.schema === false ? [] : this.validator!.errors(obj);
    const unknown = errors.map(unknownFieldOf).filter((f) => f !== undefined);
    if (unknown.length > 0) {
      const said = unknown.map((f) => `unknown field ${JSON.stringify(f)}`).join(', ');
      const why = fieldValidation === 'Strict' ? `strict decoding error: ${said}` : `${said} would be dropped without fieldValidation=Strict; the stand-in refuses it`;
      return [400, apiError(400, 'BadRequest', why)];
    }
    if (errors.length > 0) return [422, apiError(422, 'Invalid', `${r.kind} is invalid: ${errors.join('; ')}`)];
    const owners = ownerReferenceErrors(obj);
    if (owners.length > 0) return [422, apiError(422, 'Invalid', `${r.kind} "${String(obj.metadata?.['name'])}" is invalid: ${owners.join('; ')}`)];
    return undefined;
  }

  /** A create; with `dryRun` (`dryRun=All`) decoded, admitted and answered as a real one, and nothing stored, started or charged to a quota. */
  private async create(res: ServerResponse, r: Resource, namespace: string, body: unknown, fieldValidation: string | null, dryRun = false): Promise<void> {
    let obj = body as Obj;
    const refused = this.decodeRefusal(r, obj, fieldValidation);
    if (refused !== undefined) return this.reply(res, ...refused);
    const name = String(obj.metadata['name']);
    if (this.namespaces !== undefined && !this.namespaces.includes(namespace)) return this.reply(res, 404, notFound('namespaces', namespace));
    if (obj.metadata['namespace'] !== undefined && obj.metadata['namespace'] !== namespace) {
      return this.reply(res, 400, apiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request'));
    }
    if (r.plural === 'pods') {
      const refused = this.admitPod(namespace, (obj as unknown as V1Pod).spec!);
      if (refused !== undefined) return this.reply(res, 403, apiError(403, 'Forbidden', `pods "${name}" is forbidden: ${refused}`));
    }
    const store = this.store(r.plural);
    const key = `${namespace}/${name}`;
    if (store.has(key)) return this.reply(res, 409, alreadyExists(r.plural, name));
    obj.metadata = { ...obj.metadata, namespace, uid: randomUUID(), creationTimestamp: new Date().toISOString() };
    if (r.plural === 'networkpolicies') {
      this.mutateNetworkPolicy?.(obj);
      obj = { ...storedNetworkPolicy(obj), metadata: { ...obj.metadata, generation: 1 } };
    }
    if (r.plural === 'pods') obj['status'] = { phase: 'Pending' };
    if (r.plural === 'persistentvolumeclaims') obj['status'] = { phase: 'Bound', accessModes: (obj['spec'] as { accessModes?: string[] }).accessModes };
    if (dryRun) return this.reply(res, 201, { kind: r.kind, apiVersion: apiVersionOf(r), ...obj });
    this.put(r.plural, key, obj);
    if (r.plural === 'pods') this.track(this.startPod(key, obj));
    if (r.plural === 'sandboxes') reconcileSandbox(this.controllerHost(), namespace, obj);
    if (r.plural === 'sandboxwarmpools') fillPool(this.controllerHost(), namespace, obj);
    if (r.plural === 'sandboxclaims') reconcileClaim(this.controllerHost(), namespace, obj, this.claimController);
    this.reply(res, 201, { kind: r.kind, apiVersion: apiVersionOf(r), ...obj });
  }

  /**
   * An update (PUT) of a NetworkPolicy, as `kubectl replace` or `kubectl edit` sends it: decoded and
   * validated like a create, its name and namespace those of the path, a stale `resourceVersion`
   * a 409 Conflict, then through the mutating webhook and stored as the server keeps it.
   */
  private async replace(res: ServerResponse, r: Resource, namespace: string, name: string, body: unknown, fieldValidation: string | null): Promise<void> {
    const obj = body as Obj;
    const refused = this.decodeRefusal(r, obj, fieldValidation);
    if (refused !== undefined) return this.reply(res, ...refused);
    const key = `${namespace}/${name}`;
    const current = this.store(r.plural).get(key);
    if (current === undefined) return this.reply(res, 404, notFound(r.plural, name));
    if (obj.metadata['name'] !== name || (obj.metadata['namespace'] ?? namespace) !== namespace) {
      return this.reply(res, 400, apiError(400, 'BadRequest', 'the name or namespace of the object does not match the request'));
    }
    const version = obj.metadata['resourceVersion'];
    if (version !== undefined && version !== current.metadata['resourceVersion']) {
      return this.reply(res, 409, apiError(409, 'Conflict', `Operation cannot be fulfilled on ${r.plural} "${name}": the object has been modified; please apply your changes to the latest version and try again`, { name, kind: r.plural }));
    }
    this.mutateNetworkPolicy?.(obj);
    const written = storedNetworkPolicy(obj);
    const sameSpec = JSON.stringify(written['spec']) === JSON.stringify(current['spec']);
    const stored = {
      ...written,
      metadata: { ...obj.metadata, namespace, uid: current.metadata['uid'], creationTimestamp: current.metadata['creationTimestamp'], generation: Number(current.metadata['generation'] ?? 1) + (sameSpec ? 0 : 1) },
    };
    this.store(r.plural).set(key, stored);
    this.touch(r.plural, key);
    this.reply(res, 200, { kind: r.kind, apiVersion: apiVersionOf(r), ...stored });
  }

  /**
   * Admission of a new pod in `namespace`, in the API server's order: LimitRanger's defaults and
   * bounds (mutating `spec`), Pod Security "restricted", then ResourceQuota. Why it is refused, or undefined.
   */
  private admitPod(namespace: string, spec: V1PodSpec): string | undefined {
    const inNamespace = (plural: string): Obj[] => [...this.store(plural)].filter(([k]) => k.startsWith(`${namespace}/`)).map(([, o]) => o);
    const ranges = inNamespace('limitranges').flatMap((l) => ((l['spec'] as { limits?: LimitRangeItem[] } | undefined)?.limits ?? []));
    const bounds = applyLimitRanges(spec, ranges);
    if (bounds.length > 0) return `[${bounds.join(', ')}]`;
    const violations = this.enforceRestricted ? restrictedViolations(spec) : [];
    if (violations.length > 0) return `violates PodSecurity "restricted:latest": ${violations.join(', ')}`;
    const quotas = inNamespace('resourcequotas').map((q) => ({ name: String(q.metadata['name']), hard: (q['spec'] as { hard?: Record<string, string> } | undefined)?.hard ?? {} }));
    const counting = inNamespace('pods').filter((p) => !['Failed', 'Succeeded'].includes(String((p['status'] as { phase?: string } | undefined)?.phase))).map((p) => (p as unknown as V1Pod).spec!);
    return quotaRefusal(spec, counting, quotas);
  }

  /** A SelfSubjectAccessReview: what the caller's rules allow (no vendored schema for its kind). */
  private reviewAccess(req: IncomingMessage, res: ServerResponse, body: unknown): void {
    const review = body as { spec?: { resourceAttributes?: { group?: string; resource?: string; subresource?: string; verb?: string } } };
    const a = review.spec?.resourceAttributes;
    if (a?.resource === undefined || a.verb === undefined) {
      return this.reply(res, 422, apiError(422, 'Invalid', 'SelfSubjectAccessReview is invalid: spec.resourceAttributes.resource and verb are required'));
    }
    const allowed = this.allows(req, a.verb, a.group ?? '', `${a.resource}${a.subresource === undefined || a.subresource === '' ? '' : `/${a.subresource}`}`);
    this.reply(res, 201, { kind: 'SelfSubjectAccessReview', apiVersion: 'authorization.k8s.io/v1', metadata: {}, spec: review.spec, status: { allowed, ...(allowed ? {} : { reason: 'not granted by the Role (deploy/rbac.yaml) or denied by the test' }) } });
  }

  private async startPod(key: string, pod: Obj): Promise<void> {
    const v1 = pod as unknown as V1Pod;
    const c = v1.spec!.containers[0]!;
    const current = (): boolean => this.store('pods').get(key) === pod && pod.metadata['deletionTimestamp'] === undefined;
    const pulled = await pullImage(c.image ?? '', this.imagePulls, (reason, message) => {
      if (!current()) return;
      pod['status'] = waitingStatus(c.name, c.image ?? '', reason, message);
      this.touch('pods', key);
    }, this.stopping.signal);
    if (!pulled || !current()) return;
    // A kubelet mounts a configMap volume only once its map exists, retrying meanwhile (the pod
    // stays ContainerCreating); a map made right after its pod is found then.
    for (let missing = this.missingConfigMap(v1); missing !== undefined; missing = this.missingConfigMap(v1)) {
      if (!current() || this.stopping.signal.aborted) return;
      const message = `MountVolume.SetUp failed for volume "${missing.volume}" : configmap "${missing.map}" not found`;
      if (JSON.stringify(pod['status']).indexOf(message) < 0) {
        pod['status'] = waitingStatus(c.name, c.image ?? '', 'ContainerCreating', message);
        this.touch('pods', key);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const dockerName = `k8s-standin-${this.instance}-${key.replace('/', '-')}-${randomBytes(3).toString('hex')}`;
    try {
      const container = await this.docker.createContainer(containerOptions(v1, this.runtime, dockerName));
      this.containers.set(key, container.id);
      await container.start();
      if (current()) pod['status'] = runningStatus(c.name, c.image ?? '', container.id, new Date());
    } catch (err) {
      pod['status'] = waitingStatus(c.name, c.image ?? '', 'CreateContainerError', (err as Error).message);
    }
    if (this.store('pods').get(key) === pod) this.touch('pods', key);
  }

  /** A configMap volume of `pod` whose map does not exist (yet), or undefined. */
  private missingConfigMap(pod: V1Pod): { volume: string; map: string } | undefined {
    const ns = pod.metadata?.namespace ?? 'default';
    for (const v of pod.spec?.volumes ?? []) {
      const map = v.configMap?.name;
      if (map !== undefined && !this.store('configmaps').has(`${ns}/${map}`)) return { volume: v.name, map };
    }
    return undefined;
  }

  /** The kubelet's report of a container that ended (docker's `die` events): its pod is over (restartPolicy Never). */
  private async followContainerDeaths(): Promise<void> {
    const stream = await this.docker.getEvents({ filters: { label: [`${STANDIN_LABEL}=${this.instance}`], event: ['die'] } });
    this.dockerEvents = stream;
    let buffered = '';
    stream.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines.filter((l) => l.trim() !== '')) {
        const event = JSON.parse(line) as { id?: string; Actor?: { Attributes?: Record<string, string> } };
        const key = [...this.containers].find(([, id]) => id === event.id)?.[0];
        const pod = key === undefined ? undefined : this.store('pods').get(key);
        if (key !== undefined && pod !== undefined) this.ended(key, pod, Number(event.Actor?.Attributes?.['exitCode'] ?? 137));
      }
    });
    stream.on('error', () => undefined);
  }

  /** A running pod's container ended with `exitCode`: the pod is Failed or Succeeded. */
  private ended(key: string, pod: Obj, exitCode: number): void {
    if ((pod['status'] as { phase?: string } | undefined)?.phase !== 'Running' || pod.metadata['deletionTimestamp'] !== undefined) return;
    const c = (pod as unknown as V1Pod).spec!.containers[0]!;
    pod['status'] = terminatedStatus(pod['status'] as object, c.name, c.image ?? '', exitCode, new Date());
    this.touch('pods', key);
  }

  /** Look at the container again: a container that ended makes the pod Failed/Succeeded (restartPolicy Never). */
  private async refresh(key: string, pod: Obj): Promise<void> {
    const status = pod['status'] as { phase?: string } | undefined;
    const id = this.containers.get(key);
    if (status?.phase !== 'Running' || id === undefined) return;
    const info = await this.docker.getContainer(id).inspect().catch(() => undefined);
    if (info !== undefined && info.State.Running) return;
    this.ended(key, pod, info?.State.ExitCode ?? 137);
  }

  /** A Sandbox's pod looked at again first, so its status follows the pod as it is now (as the controller's watch would have seen it end). */
  private async refreshSandboxPod(key: string): Promise<void> {
    const pod = this.store('pods').get(key);
    if (pod !== undefined) await this.refresh(key, pod);
  }

  /** The label and field selectors of a list or watch, or a 400 sent. */
  private selectors(res: ServerResponse, r: Resource, query: URLSearchParams): ((labels: Record<string, string>, obj: Obj) => boolean) | undefined {
    try {
      const labels = parseLabelSelector(query.get('labelSelector'));
      const fields = parseFieldSelector(r.plural, query.get('fieldSelector'));
      return (l, o) => labels(l) && fields(o);
    } catch (err) {
      this.reply(res, 400, apiError(400, 'BadRequest', (err as Error).message));
      return undefined;
    }
  }

  private matching(r: Resource, namespace: string, matches: (labels: Record<string, string>, obj: Obj) => boolean): [string, Obj][] {
    return [...this.store(r.plural)].filter(([key, obj]) => key.startsWith(`${namespace}/`) && matches((obj.metadata['labels'] ?? {}) as Record<string, string>, obj));
  }

  private async list(res: ServerResponse, r: Resource, namespace: string, query: URLSearchParams): Promise<void> {
    const matches = this.selectors(res, r, query);
    if (matches === undefined) return;
    // Looked at again first (an inspect of each pod's container waits on the engine); then what the
    // store holds and its resourceVersion are read in one step, as a real server's list is one
    // snapshot: a pod deleted during the looks is not listed with a version after its deletion
    // (a watch from that version would never see it go).
    const before = this.matching(r, namespace, matches);
    if (r.plural === 'pods') for (const [key, obj] of before) await this.refresh(key, obj);
    if (r.plural === 'sandboxes') for (const [key] of before) await this.refreshSandboxPod(key);
    const found = this.matching(r, namespace, matches);
    this.reply(res, 200, { kind: `${r.kind}List`, apiVersion: apiVersionOf(r), metadata: { resourceVersion: String(this.resourceVersion) }, items: found.map(([, o]) => o) });
  }

  /** A watch on a collection (watch-hub.ts), with the real server's parameters. */
  private watch(res: ServerResponse, r: Resource, namespace: string, query: URLSearchParams): void {
    const matches = this.selectors(res, r, query);
    if (matches === undefined) return;
    const rv = query.get('resourceVersion');
    if (rv !== null && rv !== '' && !/^\d+$/.test(rv)) return this.reply(res, 400, apiError(400, 'BadRequest', `invalid resource version: ${JSON.stringify(rv)}`));
    const timeout = query.get('timeoutSeconds');
    this.watches.serve({
      plural: r.plural, namespace, kind: r.kind, apiVersion: apiVersionOf(r),
      matches: (labels, obj) => matches(labels as Record<string, string>, obj),
      from: rv === null || rv === '' || rv === '0' ? undefined : Number(rv),
      bookmarks: query.get('allowWatchBookmarks') === 'true',
      timeoutMs: timeout === null ? 1_800_000 : Number(timeout) * 1000,
      current: () => this.matching(r, namespace, matches).map(([, o]) => structuredClone(o)),
    }, res);
  }

  private async get(res: ServerResponse, r: Resource, namespace: string, name: string): Promise<void> {
    const key = `${namespace}/${name}`;
    const obj = this.store(r.plural).get(key);
    if (obj === undefined) return this.reply(res, 404, notFound(r.plural, name));
    if (r.plural === 'pods') await this.refresh(key, obj);
    if (r.plural === 'sandboxes') await this.refreshSandboxPod(key);
    this.reply(res, 200, { kind: r.kind, apiVersion: apiVersionOf(r), ...obj });
  }

  /** Deletion is graceful for pods: the object stays, with a deletionTimestamp, until its container is gone. */
  private async remove(res: ServerResponse, r: Resource, namespace: string, name: string): Promise<void> {
    const key = `${namespace}/${name}`;
    const store = this.store(r.plural);
    const obj = store.get(key);
    if (obj === undefined) return this.reply(res, 404, notFound(r.plural, name));
    const out = { kind: r.kind, apiVersion: apiVersionOf(r), ...obj };
    if (r.plural !== 'pods') {
      this.drop(r.plural, key);
      if (r.plural === 'persistentvolumeclaims') rmSync(claimDir(this.dataDir, namespace, name), { recursive: true, force: true });
      if (['sandboxes', 'sandboxclaims', 'sandboxwarmpools'].includes(r.plural)) this.collectGarbage(namespace, String(obj.metadata['uid']));
      return this.reply(res, 200, out);
    }
    this.deletePodObject(key, obj);
    this.reply(res, 200, out);
  }

  /** Stores a new object (its resourceVersion given now) and tells the watches: ADDED. */
  private put(plural: string, key: string, obj: Obj): void {
    this.store(plural).set(key, obj);
    this.record('ADDED', plural, key, obj);
  }

  /** The object at `key` changed: a new resourceVersion, and the watches hear MODIFIED. */
  private touch(plural: string, key: string): void {
    const obj = this.store(plural).get(key);
    if (obj !== undefined) this.record('MODIFIED', plural, key, obj);
  }

  /** Removes the object at `key`; the watches hear DELETED. */
  private drop(plural: string, key: string): void {
    const obj = this.store(plural).get(key);
    if (obj === undefined) return;
    this.store(plural).delete(key);
    this.record('DELETED', plural, key, obj);
  }

  private record(type: 'ADDED' | 'MODIFIED' | 'DELETED', plural: string, key: string, obj: Obj): void {
    obj.metadata['resourceVersion'] = String(++this.resourceVersion);
    const r = RESOURCES.find((x) => x.plural === plural)!;
    this.watches.record(type, plural, key.split('/')[0] as string, key, obj, r.kind, apiVersionOf(r));
    if (plural === 'pods' && type !== 'ADDED') this.podChanged(key);
  }

  /** What follows a pod's change, as the controllers see it: its Sandbox's and its claim's Ready conditions. */
  private podChanged(podKey: string): void {
    const [namespace, name] = podKey.split('/') as [string, string];
    const host = this.controllerHost();
    const readyOf = (o: Obj): string => JSON.stringify(((o['status'] as { conditions?: { type: string; status: string; reason?: string }[] } | undefined)?.conditions ?? []).map((c) => [c.type, c.status, c.reason]));
    const follow = (plural: string, key: string, obj: Obj, update: () => void): void => {
      const before = readyOf(obj);
      update();
      if (readyOf(obj) !== before) this.touch(plural, key);
    };
    const sandbox = this.store('sandboxes').get(podKey);
    if (sandbox !== undefined) follow('sandboxes', podKey, sandbox, () => sandboxStatus(host, namespace, sandbox));
    for (const [key, claim] of this.store('sandboxclaims')) {
      if (key.startsWith(`${namespace}/`) && (claim['status'] as { sandbox?: { name?: string } } | undefined)?.sandbox?.name === name) {
        follow('sandboxclaims', key, claim, () => claimStatus(host, namespace, claim));
      }
    }
  }

  /** What the agent-sandbox emulation needs of the server. */
  private controllerHost(): ControllerHost {
    return {
      store: (plural) => this.store(plural),
      put: (plural, key, obj) => this.put(plural, key, obj),
      touch: (plural, key) => this.touch(plural, key),
      admit: (namespace, spec) => this.admitPod(namespace, spec),
      startPod: (key, pod) => this.track(this.startPod(key, pod)),
      later: (ms, fn) => {
        const t = setTimeout(() => {
          this.timers.delete(t);
          fn();
        }, ms);
        this.timers.add(t);
      },
    };
  }

  /**
   * Owner-reference garbage collection: what a deleted object owned goes too (a claim's Sandbox,
   * then its pod and claims; a pod's ConfigMaps), as a real cluster's garbage collector does.
   */
  private collectGarbage(namespace: string, ownerUid: string): void {
    for (const plural of ['sandboxes', 'pods', 'persistentvolumeclaims', 'configmaps']) {
      for (const [key, obj] of [...this.store(plural)]) {
        const refs = (obj.metadata['ownerReferences'] ?? []) as { uid?: string }[];
        if (!key.startsWith(`${namespace}/`) || !refs.some((ref) => ref.uid === ownerUid)) continue;
        if (plural === 'sandboxes') {
          this.drop(plural, key);
          this.collectGarbage(namespace, String(obj.metadata['uid']));
        } else if (plural === 'pods') {
          this.deletePodObject(key, obj);
        } else {
          this.drop(plural, key);
          rmSync(claimDir(this.dataDir, namespace, String(obj.metadata['name'])), { recursive: true, force: true });
        }
      }
    }
  }

  /**
   * Graceful pod deletion: the object stays, with a deletionTimestamp, until its container is
   * gone; then it goes whatever else failed (a kubelet that cannot clean a volume up still lets
   * the pod go). `terminating` says what each deletion waits on meanwhile.
   */
  private deletePodObject(key: string, obj: Obj): void {
    const store = this.store('pods');
    if (obj.metadata['deletionTimestamp'] !== undefined) return;
    obj.metadata['deletionTimestamp'] = new Date().toISOString();
    obj.metadata['deletionGracePeriodSeconds'] = 0;
    this.touch('pods', key);
    this.track((async () => {
      const id = this.containers.get(key);
      try {
        if (id !== undefined) {
          this.terminating.set(key, `the engine's removal of container ${id.slice(0, 12)}, asked at ${new Date().toISOString()}`);
          await this.docker.getContainer(id).remove({ force: true }).catch(() => undefined);
        }
        // A pod made again under this name meanwhile has a container of its own: keep its entry.
        if (this.containers.get(key) === id) this.containers.delete(key);
        this.terminating.set(key, 'the removal of its emptyDir volumes');
        try {
          rmSync(join(this.dataDir, 'emptydir', String(obj.metadata['uid'])), { recursive: true, force: true, maxRetries: 3 });
        } catch {
          // left for stop(), which removes the data dir
        }
      } finally {
        this.terminating.delete(key);
        if (store.get(key) === obj) {
          this.drop('pods', key);
          this.collectGarbage(key.slice(0, key.indexOf('/')), String(obj.metadata['uid']));
          const owner = ((obj.metadata['ownerReferences'] ?? []) as { kind?: string; uid?: string; controller?: boolean }[]).find((o) => o.controller === true && o.kind === 'Sandbox');
          if (owner?.uid !== undefined) podGone(this.controllerHost(), key.slice(0, key.indexOf('/')), owner.uid);
        }
      }
    })());
  }

  private upgrade(req: IncomingMessage, sock: import('node:net').Socket, head: Buffer): void {
    const fail = (code: number, body: StatusBody): void => {
      sock.end(`HTTP/1.1 ${code} ${code === 401 ? 'Unauthorized' : 'Error'}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${JSON.stringify(body)}`);
    };
    if (!this.authorized(req)) return fail(401, apiError(401, 'Unauthorized', 'Unauthorized'));
    const url = new URL(req.url ?? '/', this.url);
    this.requests.total++;
    this.requests.byVerb['exec'] = (this.requests.byVerb['exec'] ?? 0) + 1;
    const m = PATH_RE.exec(url.pathname);
    if (m === null || m[1] !== '/api/v1' || m[3] !== 'pods' || m[4] === undefined || m[5] !== 'exec') {
      return fail(404, apiError(404, 'NotFound', `the server could not find the requested resource (${url.pathname})`));
    }
    // A WebSocket exec is authorized as `create` on pods/exec (Kubernetes 1.35, this server's version).
    if (!this.allows(req, 'create', '', 'pods/exec')) {
      return fail(403, apiError(403, 'Forbidden', `pods "${m[4]}" is forbidden: User "berth-standin" cannot create resource "pods/exec" in API group "" in the namespace "${m[2]}"`));
    }
    const key = `${m[2]}/${m[4]}`;
    const pod = this.store('pods').get(key) as unknown as V1Pod | undefined;
    if (pod === undefined) return fail(404, notFound('pods', m[4]));
    const containerName = url.searchParams.get('container') ?? pod.spec!.containers[0]!.name;
    if (!pod.spec!.containers.some((c) => c.name === containerName)) {
      return fail(400, apiError(400, 'BadRequest', `container ${containerName} is not valid for pod ${m[4]}`));
    }
    const id = this.containers.get(key);
    if (pod.status?.phase !== 'Running' || id === undefined) {
      return fail(400, apiError(400, 'BadRequest', `pod ${m[4]} is not running (phase ${pod.status?.phase ?? 'unknown'})`));
    }
    this.execRequests.push(req.url ?? '');
    const argv = url.searchParams.getAll('command');
    const flag = (n: string): boolean => url.searchParams.get(n) === 'true';
    this.wss.handleUpgrade(req, sock, head, (ws: WebSocket) => {
      const bridge = bridgeExec(this.docker, id, ws, ws.protocol, { argv, stdin: flag('stdin'), stdout: flag('stdout'), stderr: flag('stderr'), tty: flag('tty') });
      this.bridges.add(bridge);
      this.track(bridge.done.finally(() => this.bridges.delete(bridge)));
    });
  }
}

function apiVersionOf(r: Resource): string {
  return r.prefix.replace(/^\/apis?\//, '');
}

/** The verb an audit log gives a request (exec upgrades are counted apart). */
function verbOf(method: string, url: URL): string {
  const named = PATH_RE.exec(url.pathname)?.[4] !== undefined;
  switch (method) {
    case 'GET': return named ? 'get' : ['1', 'true'].includes(url.searchParams.get('watch') ?? '') ? 'watch' : url.pathname.startsWith('/version') ? 'version' : 'list';
    case 'POST': return 'create';
    case 'DELETE': return 'delete';
    default: return method.toLowerCase();
  }
}

/** The dotted path of an unknown field from a validator error (`/spec/containers/0: ... (unknown field "x")` is `spec.containers[0].x`), else undefined. */
function unknownFieldOf(error: string): string | undefined {
  const m = /^(\S*): .*\(unknown field "([^"]+)"\)$/.exec(error);
  if (m === null) return undefined;
  const parts = (m[1] as string).split('/').filter((p) => p !== '');
  const path = parts.reduce((acc, p) => (/^\d+$/.test(p) ? `${acc}[${p}]` : acc === '' ? p : `${acc}.${p}`), '');
  return path === '' ? m[2] : `${path}.${m[2] as string}`;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

/**
 * What a real API server says of a written object's ownerReferences (ValidateOwnerReferences):
 * apiVersion, kind, name and uid are all required.
 */
function ownerReferenceErrors(obj: Obj): string[] {
  const refs = obj.metadata?.['ownerReferences'];
  if (refs === undefined) return [];
  if (!Array.isArray(refs)) return ['metadata.ownerReferences: Invalid value: must be a list'];
  const errors: string[] = [];
  refs.forEach((ref: Record<string, unknown>, i: number) => {
    for (const field of ['apiVersion', 'kind', 'name', 'uid']) {
      if (typeof ref?.[field] !== 'string' || ref[field] === '') errors.push(`metadata.ownerReferences[${i}].${field}: Invalid value: "": ${field} must not be empty`);
    }
  });
  return errors;
}
