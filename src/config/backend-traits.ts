import type { EgressMode } from '../egress/policy.js';

/** How a backend separates commands from the host. */
export type Isolation = 'container' | 'namespace' | 'remote' | 'none';

/**
 * What a backend is, as the rest of berth needs to know it. Policy, config rules, the broker and
 * the tool descriptions read these; nothing outside `src/backends/` asks for a backend by name.
 */
export interface BackendTraits {
  /**
   * It binds host dirs into its sandboxes: `workspace.mount`, operator volumes, and a host path
   * under the mounted dir mapping to the same place under `/workspace` (cwd records, workdirs).
   */
  mountsHostDirs: boolean;
  isolation: Isolation;
  /** Removing a sandbox ends every process in it, background jobs included (a container does; a host dir does not). */
  jobsDieWithSandbox: boolean;
  /**
   * Its sandboxes' processes run on when the berth process that started them ends (a container's
   * do); absent: they end with it (bwrap's `--die-with-parent`), so a job never outlives its call's
   * process and nothing is handed to a keeper.
   */
  runsWithoutBerth?: boolean;
  /**
   * Its engine lists this installation's sandboxes by label (`listManaged`): the orphan reaper's
   * engine pass, and out-of-band removal is noticed by asking it. Otherwise the broker knows its
   * sandboxes only from its own records.
   */
  listsByLabel: boolean;
  /**
   * It keys like a container (design §3, rows 2, 4, 5 and 7: "container" and
   * "container-persistent"): a non-persistent profile gives a task its root task's sandbox, and a
   * persistent profile shares one sandbox (`sharedKey`, or the profile's) across sessions. Without
   * it, sessions keep their own sandboxes and `sharedKey` in scope auto is a config error.
   */
  containerKeying: boolean;
  /** In-sandbox paths are host paths (local): an attached workspace is the starting dir, and a file is its own host path. */
  hostPaths: boolean;
  /**
   * Every process a sandbox's shell can signal belongs to that sandbox (its own pid namespace),
   * so the warden may end them all (`kill -1`) when a fork bomb took every pid. Never on the host.
   */
  ownsProcessTable: boolean;
  /**
   * The `egress.mode`s it enforces (absent: `open` only). `allowlist` also means berth can put its
   * egress proxy in front of the sandbox (a network namespace of its own that berth enters), which
   * secretless `credentials:` need in any mode.
   */
  egressModes?: readonly EgressMode[];
  /**
   * How its sandboxes reach berth's egress proxy: `netns`, a listener in each sandbox's own
   * network namespace (the default); `shared`, the one listener at `egressProxy.advertise`, each
   * sandbox naming itself by its proxy credential (berth cannot enter a pod's namespace on a cluster).
   */
  egressProxyReach?: 'netns' | 'shared';
}

/**
 * The backends a config was parsed against, as config rules and policy read them: their names and
 * traits (the backends' catalog, `backends/catalog.ts`, is one).
 */
export interface BackendTraitsTable {
  /** Module names in registry order (the order config messages list them in). */
  readonly names: readonly [string, ...string[]];
  /** The traits of `name`; a name the table does not know is a config error naming the known ones. */
  traits(name: string): Readonly<BackendTraits>;
  /** Names of the backends whose traits pass `test`, in registry order. */
  namesWhere(test: (traits: Readonly<BackendTraits>) => boolean): string[];
}
