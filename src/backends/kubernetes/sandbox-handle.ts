import type { SandboxHandle, SandboxSpec, SpawnOptions } from '../backend.js';
import type { SpawnedProcess } from '../../shell/transport.js';
import { endingDropped } from './dropped-stream.js';
import { spawnInPod, type ExecTarget } from './spawn.js';
import { HOME, STATE_DIR, TMP, WORKSPACE } from './manifests.js';
import type { KubernetesSettings } from './settings.js';

export interface PodHandleInput {
  spec: SandboxSpec<KubernetesSettings>;
  ref: string;
  target: ExecTarget;
  recreated: boolean;
  log: (msg: string) => void;
}

/**
 * One running sandbox pod: every process starts over its own pods/exec WebSocket (`spawnInPod`:
 * env and cwd on stdin, never argv). Its files live in the pod's volumes on a cluster node, so
 * no in-sandbox path is a host path.
 */
export class PodSandboxHandle implements SandboxHandle {
  readonly spec: SandboxSpec<KubernetesSettings>;
  readonly ref: string;
  readonly name: string;
  readonly defaultCwd = WORKSPACE;
  readonly stateDir = STATE_DIR;
  readonly homeDir = HOME;
  readonly fileRoots: readonly string[] = [WORKSPACE, HOME, TMP];
  readonly hostDir = undefined;
  readonly recreated: boolean;
  /** emptyDir volumes: a restart (a new pod) empties them. A persistent sandbox keeps the rest on its claim. */
  readonly volatileDirs: readonly string[];
  private readonly target: ExecTarget;
  private readonly log: (msg: string) => void;

  constructor(input: PodHandleInput) {
    this.spec = input.spec;
    this.ref = input.ref;
    this.name = input.target.pod;
    this.target = input.target;
    this.recreated = input.recreated;
    this.log = input.log;
    this.volatileDirs = input.spec.ephemeral ? [HOME, TMP, WORKSPACE] : [TMP];
  }

  async spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    const proc = await spawnInPod(this.target, argv, { env: opts.env, cwd: opts.cwd, stdin: opts.stdin, log: this.log });
    return endingDropped(this.target, proc, opts.stdin, this.log);
  }

  hostPathOf(): undefined {
    return undefined;
  }
}
