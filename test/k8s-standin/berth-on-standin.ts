import { mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseRef } from '../../src/backends/kubernetes/refs.js';
import { deletePod, waitForPodGone } from '../../src/backends/kubernetes/pods.js';
import type { KubeClient } from '../../src/backends/kubernetes/kube-client.js';
import { TEST_IMAGE } from '../helpers/docker.js';
import { standinAdminClient } from './fixtures.js';
import { StandinApiServer, type StandinOptions } from './server.js';

/*
 * berth itself (its config, broker and kubernetes module) pointed at a stand-in API server: the
 * server writes a kubeconfig file, and configs name it under `kubernetes.kubeconfig`, exactly as
 * an operator's config names a cluster's.
 */

const POD_GONE_MS = 90_000;

export class BerthOnStandin {
  /** The test's own hand, as a cluster admin's kubectl (fixtures, deletes behind berth's back); berth itself reaches the server through `kubeconfig`, with the token deploy/rbac.yaml's Role limits. */
  readonly client: KubeClient;
  private readonly homes: string[] = [];

  private constructor(readonly server: StandinApiServer, private readonly dir: string, readonly kubeconfig: string) {
    this.client = standinAdminClient(server);
  }

  static async start(opts: StandinOptions = {}): Promise<BerthOnStandin> {
    const server = await StandinApiServer.start(opts);
    const dir = mkdtempSync(join(tmpdir(), 'berth-k8s-conf-'));
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, server.kubeConfig('berth').exportConfig(), { mode: 0o600 });
    return new BerthOnStandin(server, dir, kubeconfig);
  }

  /** The `kubernetes:` section that reaches this stand-in (plus `extra`). */
  section(extra: Record<string, unknown> = {}): Record<string, unknown> {
    return { kubeconfig: this.kubeconfig, image: TEST_IMAGE, podStartTimeoutSeconds: 60, ...extra };
  }

  /** A fresh BERTH_HOME, removed by `reset`. */
  newHome(): string {
    const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-k8s-home-')));
    this.homes.push(home);
    return home;
  }

  /** Deletes a sandbox's object behind berth's back, as `kubectl delete` would (it waits for a pod to be gone). */
  async removeOutOfBand(ref: string): Promise<void> {
    const r = parseRef(ref);
    if (r.kind === 'pod') {
      await deletePod(this.client, r.name);
      await this.podGone(r.name);
      return;
    }
    const group = r.kind === 'sandbox' ? 'agents.x-k8s.io' : 'extensions.agents.x-k8s.io';
    await this.client.custom.deleteNamespacedCustomObject({ group, version: 'v1beta1', namespace: r.namespace, plural: r.kind === 'sandbox' ? 'sandboxes' : 'sandboxclaims', name: r.name });
  }

  /**
   * Waits for pod `name` of namespace berth to be gone, as long as a busy engine may take to remove
   * its container (a CI machine running other suites took over 30 s once); a timeout says what the
   * stand-in's deletion was waiting on.
   */
  private async podGone(name: string): Promise<void> {
    try {
      await waitForPodGone(this.client, name, POD_GONE_MS);
    } catch (err) {
      const waiting = this.server.terminating.get(`berth/${name}`);
      throw waiting === undefined ? err : new Error(`${(err as Error).message} (the stand-in was waiting on ${waiting})`);
    }
  }

  /** Every object of the namespace deleted (pods waited out) and the homes removed: the next test starts clean. */
  async reset(): Promise<void> {
    for (const plural of ['sandboxclaims', 'sandboxwarmpools', 'sandboxtemplates', 'sandboxes']) {
      const group = plural === 'sandboxes' ? 'agents.x-k8s.io' : 'extensions.agents.x-k8s.io';
      const list = (await this.client.custom.listNamespacedCustomObject({ group, version: 'v1beta1', namespace: 'berth', plural })) as { items: { metadata: { name: string } }[] };
      for (const o of list.items) await this.client.custom.deleteNamespacedCustomObject({ group, version: 'v1beta1', namespace: 'berth', plural, name: o.metadata.name }).catch(() => undefined);
    }
    const pods = (await this.client.core.listNamespacedPod({ namespace: 'berth' })).items.map((p) => p.metadata!.name!);
    for (const name of pods) await deletePod(this.client, name);
    await Promise.all(pods.map((name) => this.podGone(name)));
    for (const c of (await this.client.core.listNamespacedPersistentVolumeClaim({ namespace: 'berth' })).items) {
      await this.client.core.deleteNamespacedPersistentVolumeClaim({ namespace: 'berth', name: c.metadata!.name! }).catch(() => undefined);
    }
    for (const h of this.homes.splice(0)) rmSync(h, { recursive: true, force: true });
  }

  /** Stops the server (removing every container it started) and removes the kubeconfig. */
  async stop(): Promise<void> {
    try {
      await this.reset();
    } finally {
      await this.server.stop();
      rmSync(this.dir, { recursive: true, force: true });
    }
  }
}
