import {
  ApiException,
  AuthorizationV1Api,
  type ConfigurationOptions,
  CoreV1Api,
  createConfiguration,
  CustomObjectsApi,
  Exec,
  KubeConfig,
  NetworkingV1Api,
  ServerConfiguration,
} from '@kubernetes/client-node';
import { BackendUnavailableError, BerthError, ConfigError, SandboxNotFoundError } from '../../errors.js';
import { ApiTransport } from './api-transport.js';
import { TLS_REMEDY, tlsFailure } from './tls-failure.js';
import type { KubernetesSettings } from './settings.js';

/** The API clients of one cluster connection, all from one KubeConfig. */
export interface KubeClient {
  readonly kubeConfig: KubeConfig;
  readonly namespace: string;
  readonly core: CoreV1Api;
  readonly networking: NetworkingV1Api;
  readonly custom: CustomObjectsApi;
  readonly authorization: AuthorizationV1Api;
  readonly exec: Exec;
  /** The connection pool, timeouts and retries every request of these clients goes through; watches use it directly. */
  readonly transport: ApiTransport;
  /**
   * Per-call options for a create whose caller takes AlreadyExists as its own earlier success:
   * such a create may be sent again after a 5xx or a timeout (others only after a 429).
   */
  readonly idempotent: ConfigurationOptions;
  /** The API server's URL, for messages. */
  readonly server: string;
}

/**
 * The KubeConfig the settings name: the in-cluster service account, or a kubeconfig file (default
 * `$KUBECONFIG` / `~/.kube/config`) and context. Config that cannot be honoured is a ConfigError.
 */
export function kubeConfigFor(s: KubernetesSettings): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (s.inCluster) kc.loadFromCluster();
    else if (s.kubeconfig !== undefined) kc.loadFromFile(s.kubeconfig);
    else kc.loadFromDefault();
  } catch (err) {
    const where = s.inCluster ? 'the in-cluster service account' : s.kubeconfig ?? 'the default kubeconfig ($KUBECONFIG or ~/.kube/config)';
    throw new ConfigError(`kubernetes: cannot load ${where}: ${(err as Error).message}; check kubernetes.kubeconfig / kubernetes.inCluster`, { cause: err });
  }
  if (s.context !== undefined) {
    if (kc.getContextObject(s.context) === null) {
      throw new ConfigError(`kubernetes.context "${s.context}" is not in the kubeconfig (contexts: ${kc.getContexts().map((c) => c.name).join(', ') || 'none'})`);
    }
    kc.setCurrentContext(s.context);
  }
  if (kc.getCurrentCluster() === null) throw new ConfigError('kubernetes: the kubeconfig has no current cluster; set kubernetes.context');
  return kc;
}

/**
 * The clients for `kc`, working in `namespace`, all sending through `transport` (one per
 * cluster connection: share it between namespaces; by default a new one). Does no I/O.
 */
export function kubeClient(kc: KubeConfig, namespace: string, transport = new ApiTransport(kc)): KubeClient {
  const server = kc.getCurrentCluster()?.server;
  if (server === undefined) throw new ConfigError('kubernetes: the kubeconfig has no current cluster; set kubernetes.context');
  // As KubeConfig.makeApiClient builds them, but on berth's transport.
  const configuration = createConfiguration({ baseServer: new ServerConfiguration(server, {}), authMethods: { default: kc }, httpApi: transport.http });
  return {
    kubeConfig: kc,
    namespace,
    core: new CoreV1Api(configuration),
    networking: new NetworkingV1Api(configuration),
    custom: new CustomObjectsApi(configuration),
    authorization: new AuthorizationV1Api(configuration),
    exec: new Exec(kc),
    transport,
    idempotent: { httpApi: transport.idempotentCreates },
    server,
  };
}

/** The HTTP status of an API error, or undefined for anything else (network errors included). */
export function apiStatusOf(err: unknown): number | undefined {
  return err instanceof ApiException ? (err.code as number) : undefined;
}

interface StatusBody {
  message?: string;
  details?: { kind?: string; name?: string };
}

/** An error's Status body, if the API server sent one. */
function apiBody(err: unknown): StatusBody | string | undefined {
  if (!(err instanceof ApiException)) return undefined;
  const body = err.body as unknown;
  if (typeof body !== 'string') return body as StatusBody | undefined;
  try {
    return JSON.parse(body) as StatusBody;
  } catch {
    return body.slice(0, 500);
  }
}

/** The API server's own message from an error's Status body, if it sent one. */
export function apiMessage(err: unknown): string | undefined {
  const body = apiBody(err);
  return typeof body === 'string' ? body : body?.message;
}

/** True when a 404 says the namespace itself is missing (a create in it), not the object. */
function namespaceMissing(err: unknown): boolean {
  const body = apiBody(err);
  return typeof body === 'object' && body.details?.kind === 'namespaces';
}

/**
 * One translator for API errors (STYLE: one per boundary): what the caller decides on, with the
 * API server's message and the fix. `doing` names the call (`create pod berth-...`).
 */
export function fromKubeError(client: Pick<KubeClient, 'server' | 'namespace'>, err: unknown, doing: string): BerthError {
  if (err instanceof BerthError) return err;
  const status = apiStatusOf(err);
  const msg = apiMessage(err);
  const said = msg === undefined ? '' : `: ${msg}`;
  switch (status) {
    case undefined: {
      const tls = tlsFailure(err);
      if (tls !== undefined) {
        return new ConfigError(`kubernetes: could not ${doing}: berth does not trust the TLS certificate of the API server at ${client.server} (${tls}); ${TLS_REMEDY}`, { cause: err });
      }
      return new BackendUnavailableError(
        `kubernetes: could not ${doing}: the API server at ${client.server} did not answer (${(err as Error).message}); check the cluster is reachable and kubernetes.kubeconfig / kubernetes.context`,
        { cause: err },
      );
    }
    case 401:
      return new BerthError('engine_refused', `kubernetes: could not ${doing}: the API server at ${client.server} refused berth's credentials (401)${said}; renew the kubeconfig's token or certificate`, { cause: err });
    case 403:
      return new BerthError(
        'engine_refused',
        `kubernetes: could not ${doing} in namespace "${client.namespace}" (403 Forbidden)${said}; apply deploy/rbac.yaml for berth's user or service account, or check the namespace's admission policy`,
        { cause: err },
      );
    case 404:
      if (namespaceMissing(err)) {
        return new ConfigError(
          `kubernetes: could not ${doing}: namespace "${client.namespace}" does not exist at ${client.server}; create it (kubectl create namespace ${client.namespace}, then deploy/README.md) or fix kubernetes.namespace`,
          { cause: err },
        );
      }
      return new SandboxNotFoundError(`kubernetes: could not ${doing} in namespace "${client.namespace}" (404)${said}`, { cause: err });
    default:
      return new BerthError('engine_refused', `kubernetes: could not ${doing}: the API server answered ${status}${said}`, { cause: err });
  }
}
