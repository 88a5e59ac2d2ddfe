import { afterAll, beforeAll, describe, it } from 'vitest';
import { kubeClient, kubeConfigFor, type KubeClient } from '../../src/backends/kubernetes/kube-client.js';
import { KUBERNETES_DEFAULTS } from '../../src/backends/kubernetes/settings.js';
import { TEST_IMAGE } from '../helpers/docker.js';
import { describeStandin, ensureStandinImage } from './describe-standin.js';
import { MISSING_IMAGE, standinImageFor } from './images.js';
import { StandinApiServer } from './server.js';

/*
 * The clusters a kubernetes suite runs against: always the stand-in (when Docker answers), and a
 * real cluster when `BERTH_KUBECONFIG` names a kubeconfig (skipped visibly otherwise):
 *
 *   BERTH_KUBECONFIG=~/.kube/config BERTH_K8S_NAMESPACE=berth BERTH_K8S_IMAGE=registry/berth-sandbox:tag \
 *     npx vitest run test/e2e/k8s-sandboxes.test.ts
 *
 * The namespace must exist with deploy/rbac.yaml applied for the kubeconfig's user, and the
 * image must be pullable there and have /bin/sh (and bash for shells). `BERTH_K8S_CONTEXT`
 * picks a context. Tests that need the stand-in's failure hooks skip on a real cluster.
 */

export interface ClusterUnderTest {
  /** `stand-in` or `cluster <server>`. */
  readonly name: string;
  readonly client: KubeClient;
  /** The image a sandbox pod should use there. */
  readonly image: string;
  /** An image reference that cannot be pulled there. */
  readonly missingImage: string;
  /** The stand-in itself (failure hooks, its containers), or undefined on a real cluster. */
  readonly standin: StandinApiServer | undefined;
  stop(): Promise<void>;
}


/** Starts the stand-in as a cluster under test. */
export async function standinCluster(): Promise<ClusterUnderTest> {
  await ensureStandinImage();
  const server = await StandinApiServer.start({ imageFor: standinImageFor });
  return { name: 'stand-in', client: kubeClient(server.kubeConfig('berth'), 'berth'), image: TEST_IMAGE, missingImage: MISSING_IMAGE, standin: server, stop: () => server.stop() };
}

/** The real cluster of `BERTH_KUBECONFIG`, or undefined when it is not set. */
export function realCluster(): ClusterUnderTest | undefined {
  const kubeconfig = process.env['BERTH_KUBECONFIG'];
  if (kubeconfig === undefined || kubeconfig === '') return undefined;
  const namespace = process.env['BERTH_K8S_NAMESPACE'] ?? 'berth';
  const kc = kubeConfigFor({ ...KUBERNETES_DEFAULTS, kubeconfig, context: process.env['BERTH_K8S_CONTEXT'] || undefined, namespace });
  const client = kubeClient(kc, namespace);
  return {
    name: `cluster ${client.server}`,
    client,
    image: process.env['BERTH_K8S_IMAGE'] ?? 'berth-sandbox:latest',
    missingImage: MISSING_IMAGE,
    standin: undefined,
    stop: async () => undefined,
  };
}

/**
 * Declares `body` once per cluster under test: the stand-in (via describeStandin: a visible skip
 * without Docker), and the real cluster of BERTH_KUBECONFIG or a visible skip saying how to run it.
 * `body` reads the cluster through the getter, inside its hooks and tests.
 */
export function describeClusters(name: string, body: (cluster: () => ClusterUnderTest) => void): void {
  let standin: ClusterUnderTest | undefined;
  describeStandin(`${name} [stand-in]`, () => {
    // Registered before the body's hooks, so it runs first.
    beforeAll(async () => {
      standin = await standinCluster();
    });
    afterAll(async () => {
      await standin?.stop();
    });
    body(() => standin as ClusterUnderTest);
  });
  const real = realCluster();
  if (real === undefined) {
    describe.skip(`${name} [real cluster]`, () => {
      it('runs against the cluster of BERTH_KUBECONFIG (skipped on kubernetes: no live cluster here; set BERTH_KUBECONFIG to run it, see test/k8s-standin/clusters.ts)', () => undefined);
    });
    return;
  }
  describe(`${name} [${real.name}]`, () => body(() => real));
}
