import { chownSync, chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Container, V1Pod, V1PodStatus } from '@kubernetes/client-node';
import type Dockerode from 'dockerode';

/*
 * The stand-in's kubelet: one local Docker container per pod, with the pod's security context
 * translated to Docker's terms. An emptyDir becomes a fresh host directory of mode 0777, as the
 * kubelet makes it, whatever the image has at the mount point (its sizeLimit is not enforced:
 * the kubelet enforces it by eviction, later); a PVC becomes a host directory owned by the pod's
 * fsGroup (setgid, group writable, as the kubelet's fsGroup ownership change leaves it),
 * subPaths subdirectories of it; `shareProcessNamespace` becomes Docker's init as PID 1 (both
 * reap orphans). A configMap volume becomes a host directory holding its keys as files, bound
 * read-only. The container has no network unless the server was given one (`podNetwork`);
 * NetworkPolicy is never enforced here.
 */

export const STANDIN_LABEL = 'berth.k8s-standin';

export interface PodRuntimeOptions {
  docker: Dockerode;
  /** The server instance id: every container carries it in `STANDIN_LABEL`. */
  instance: string;
  /** Root of the PVC directories. */
  dataDir: string;
  /** The image that runs a pod asking for `image` (the stand-in has no registry). */
  imageFor: (image: string) => string;
  /** The node's per-pod process limit (kubelet `podPidsLimit`), applied to every pod. */
  podPidsLimit: number;
  /** The Docker network every pod joins (`none`: no network). */
  network: string;
  /** A stored ConfigMap's data, for configMap volumes (undefined: no such map, as a kubelet then waits). */
  configMap: (namespace: string, name: string) => Record<string, string> | undefined;
}

function quantityBytes(q: string | undefined): number | undefined {
  if (q === undefined) return undefined;
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(q);
  if (m === null) return undefined;
  const unit = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }[m[2] ?? ''] ?? 1;
  return Math.floor(Number(m[1]) * unit);
}

function cpuNano(q: string | undefined): number | undefined {
  if (q === undefined) return undefined;
  const milli = /^(\d+)m$/.exec(q);
  if (milli !== null) return Number(milli[1]) * 1e6;
  const n = Number(q);
  return Number.isFinite(n) && n > 0 ? Math.round(n * 1e9) : undefined;
}

/** The directory holding a claim's data. */
export function claimDir(dataDir: string, namespace: string, claim: string): string {
  return join(dataDir, namespace, claim);
}

/** The host directory behind one emptyDir volume of one pod (removed with the pod). */
export function emptyDirOf(dataDir: string, pod: V1Pod, volume: string): string {
  return join(dataDir, 'emptydir', String(pod.metadata!.uid), volume);
}

/** Owner root:fsGroup, setgid and group-writable, as the kubelet leaves a volume with an fsGroup. */
function ownByGroup(dir: string, fsGroup: number | undefined): void {
  mkdirSync(dir, { recursive: true });
  if (fsGroup === undefined) return;
  chownSync(dir, 0, fsGroup);
  chmodSync(dir, 0o2775);
}

/** The Docker create options for a pod's first container. */
export function containerOptions(pod: V1Pod, opts: PodRuntimeOptions, name: string): Dockerode.ContainerCreateOptions {
  const spec = pod.spec!;
  const c = spec.containers[0] as V1Container;
  const podSc = spec.securityContext ?? {};
  const sc = c.securityContext ?? {};
  const uid = sc.runAsUser ?? podSc.runAsUser;
  const gid = sc.runAsGroup ?? podSc.runAsGroup;
  const ns = pod.metadata!.namespace ?? 'default';
  const binds: string[] = [];
  for (const m of c.volumeMounts ?? []) {
    const vol = (spec.volumes ?? []).find((v) => v.name === m.name);
    if (vol?.emptyDir !== undefined) {
      const dir = emptyDirOf(opts.dataDir, pod, vol.name);
      mkdirSync(dir, { recursive: true });
      chmodSync(dir, 0o777);
      binds.push(`${dir}:${m.mountPath}`);
    } else if (vol?.configMap !== undefined) {
      const data = opts.configMap(ns, vol.configMap.name ?? '');
      if (data === undefined) throw new Error(`configmap "${vol.configMap.name}" not found`);
      const dir = emptyDirOf(opts.dataDir, pod, vol.name);
      mkdirSync(dir, { recursive: true });
      for (const [file, text] of Object.entries(data)) writeFileSync(join(dir, file), text, { mode: vol.configMap.defaultMode ?? 0o644 });
      binds.push(`${dir}:${m.mountPath}:ro`);
    } else if (vol?.persistentVolumeClaim !== undefined) {
      const root = claimDir(opts.dataDir, ns, vol.persistentVolumeClaim.claimName);
      ownByGroup(root, podSc.fsGroup);
      const source = m.subPath === undefined || m.subPath === '' ? root : join(root, m.subPath);
      ownByGroup(source, podSc.fsGroup);
      binds.push(`${source}:${m.mountPath}${m.readOnly === true ? ':ro' : ''}`);
    }
  }
  const limits = c.resources?.limits ?? {};
  const groups = [podSc.fsGroup, ...(podSc.supplementalGroups ?? [])].filter((g): g is number => g !== undefined).map(String);
  const command = [...(c.command ?? []), ...(c.args ?? [])];
  return {
    name,
    Image: opts.imageFor(c.image ?? ''),
    ...(c.command !== undefined ? { Entrypoint: [], Cmd: command } : command.length > 0 ? { Cmd: command } : {}),
    Env: (c.env ?? []).filter((e) => e.value !== undefined).map((e) => `${e.name}=${e.value}`),
    WorkingDir: c.workingDir,
    User: uid === undefined ? undefined : `${uid}${gid === undefined ? '' : `:${gid}`}`,
    Labels: { [STANDIN_LABEL]: opts.instance, [`${STANDIN_LABEL}.pod`]: `${ns}/${pod.metadata!.name}` },
    Tty: false,
    OpenStdin: false,
    HostConfig: {
      Init: spec.shareProcessNamespace === true,
      NetworkMode: opts.network,
      CapDrop: sc.capabilities?.drop ?? [],
      CapAdd: sc.capabilities?.add ?? [],
      SecurityOpt: sc.allowPrivilegeEscalation === false ? ['no-new-privileges:true'] : [],
      Privileged: sc.privileged === true,
      ReadonlyRootfs: sc.readOnlyRootFilesystem === true,
      GroupAdd: groups,
      Binds: binds,
      Memory: quantityBytes(limits['memory']),
      NanoCpus: cpuNano(limits['cpu']),
      PidsLimit: opts.podPidsLimit,
      RestartPolicy: { Name: 'no', MaximumRetryCount: 0 },
      AutoRemove: false,
      // Nobody reads a pod's log here (berth never asks for one); a log file per container is
      // descriptors in the engine, whose limit 1,000 pods at once reached.
      LogConfig: { Type: 'none', Config: {} },
    },
  };
}

/** The status of a pod whose container runs. */
export function runningStatus(containerName: string, image: string, containerId: string, startedAt: Date): V1PodStatus {
  return {
    phase: 'Running',
    conditions: [
      { type: 'PodScheduled', status: 'True', lastTransitionTime: startedAt },
      { type: 'Initialized', status: 'True', lastTransitionTime: startedAt },
      { type: 'ContainersReady', status: 'True', lastTransitionTime: startedAt },
      { type: 'Ready', status: 'True', lastTransitionTime: startedAt },
    ],
    hostIP: '127.0.0.1',
    startTime: startedAt,
    containerStatuses: [{
      name: containerName, image, imageID: image, containerID: `docker://${containerId}`,
      ready: true, started: true, restartCount: 0, state: { running: { startedAt } },
    }],
  };
}

/** The status of a pod whose container could not be created or started (an image that does not exist, say). */
export function waitingStatus(containerName: string, image: string, reason: string, message: string): V1PodStatus {
  return {
    phase: 'Pending',
    conditions: [{ type: 'PodScheduled', status: 'True' }, { type: 'Ready', status: 'False', reason: 'ContainersNotReady' }],
    containerStatuses: [{ name: containerName, image, imageID: '', ready: false, started: false, restartCount: 0, state: { waiting: { reason, message } } }],
  };
}

/** The status of a pod whose container ended (restartPolicy Never: the pod is over). */
export function terminatedStatus(prev: V1PodStatus, containerName: string, image: string, exitCode: number, finishedAt: Date): V1PodStatus {
  return {
    ...prev,
    phase: exitCode === 0 ? 'Succeeded' : 'Failed',
    conditions: [{ type: 'Ready', status: 'False', reason: 'PodCompleted' }],
    containerStatuses: [{
      name: containerName, image, imageID: image, ready: false, started: false, restartCount: 0,
      state: { terminated: { exitCode, reason: exitCode === 0 ? 'Completed' : 'Error', finishedAt } },
    }],
  };
}
