import type * as z from 'zod';
import type { Logger } from '../logging/logger.js';
import type { Backend, Lease } from './backend.js';

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
}

/** An operator's host dir that a section binds into sandboxes (checked against the credential surfaces at start-up). */
export interface SectionHostBind {
  source: string;
  /** The key under the section that names it (`volumes`). */
  key: string;
  /** The entry as the operator wrote it, for messages. */
  describe: string;
  /** Bound read-only: the sandbox cannot write there, so its owner does not matter. */
  readOnly: boolean;
}

/** The written form of a section: zod's output of its strict object. */
export type WrittenSection<Shape extends z.core.$ZodLooseShape> = z.output<z.ZodObject<Shape, z.core.$strict>>;

/**
 * A module's own config section (`docker:`), at the top level and in every profile. Its keys are
 * all optional and without defaults (so a written value is told from a default); `defaults` and
 * `merge` build the settings the backend reads.
 */
export interface SettingsSection<S, Shape extends z.core.$ZodLooseShape = z.core.$ZodLooseShape> {
  shape: Shape;
  defaults(): S;
  /** `base` (the top level's, or the defaults) with what one section wrote over it. */
  merge(base: S, written: WrittenSection<Shape>): S;
  /** Host dirs the operator binds through this section, for the start-up refusals (`docker.volumes`). */
  hostBinds?(settings: S): readonly SectionHostBind[];
  /**
   * Keys that hold for the whole installation (where its sandboxes live, which uids they get): a
   * profile that writes one with another value than the top level's is a config error.
   */
  installationWide?: readonly (keyof Shape & string)[];
  /**
   * The module's own cross-field rules, as messages naming the key and the fix: judged once over
   * every place of the config whose backend is this module (top level and profiles), so a rule
   * may also compare them (one cluster per installation, say). A profile that wrote none of the
   * keys involved repeats the top level's values and is left to the top level.
   */
  problems?(uses: readonly SectionUse<S>[]): string[];
}

/** One place of the config that uses a module, with its merged section, for `SettingsSection.problems`. */
export interface SectionUse<S> {
  /** The section's config path (`kubernetes`, `profiles.bot.kubernetes`). */
  at: string;
  settings: S;
  /** The place's `persistent` setting. */
  persistent: boolean;
}

/** One place's merged settings (`ProfileSettings`), seen from a module: its backend, and each section by name (`sectionOf`). */
export interface PlaceSettings {
  readonly backend: string;
}

/** What a module's factory gets from the composition root. */
export interface BackendContext {
  berthHome: string;
  installation: string;
  /** This backend's logger (`berth:<name>`); never given a secret value. */
  log: Logger;
  /** Serialises engine-object creation across this installation's processes. */
  lease: Lease;
  /**
   * The merged settings of the config's places (top level first, then each profile), for a
   * backend that may reach more than one engine, named in its settings (an SSH host, a cluster):
   * it finds its sandboxes there (reapers, `listManaged`) before any call reached it. Absent:
   * only what its calls bring. (Typed loosely: `ProfileSettings` is composed from the modules.)
   */
  profiles?: readonly PlaceSettings[];
}

/** What one sandbox may take of the host at most, in MiB; a quantity its backend does not bound is absent. */
export interface SandboxReservation {
  memoryMb?: number | undefined;
  diskMb?: number | undefined;
}

/** What the tools tell the agent about a sandbox of this backend. */
export interface SandboxWords {
  /** Where commands run and how isolated they are, in one or two sentences. */
  where(b: { persistent: boolean; sandboxKey: string; cwd: string }): string;
  /** What survives: files, across sessions or not. */
  persistence(b: { persistent: boolean; cwd: string; mounted: boolean }): string;
}

/**
 * A backend as a module: its name, traits, config section, default working dir and a lazily
 * loaded factory. Adding a backend is a folder under `src/backends/` with one of these, and one
 * line in `registry.ts`.
 *
 * @example
 * export const exampleModule = defineBackend({
 *   name: 'example',
 *   traits: { mountsHostDirs: false, isolation: 'remote', jobsDieWithSandbox: true, listsByLabel: false,
 *     containerKeying: false, hostPaths: false, ownsProcessTable: false },
 *   defaultCwd: () => '/home/sandbox',
 *   words: { where: (b) => `Commands run on a remote host, in ${b.cwd}.`, persistence: (b) => `Files persist in ${b.cwd}.` },
 *   create: async (ctx) => new (await import('./example-backend.js')).ExampleBackend(ctx),
 * });
 */
export interface BackendModule<N extends string = string, S = unknown> {
  readonly name: N;
  readonly traits: Readonly<BackendTraits>;
  /** Its `<name>:` config section; absent when it has no settings. */
  readonly settings?: SettingsSection<S>;
  /** Its sandboxes run an image: task overrides may set one (elsewhere an image override is refused). */
  readonly images?: { of(settings: S): string; with(settings: S, image: string): S };
  /** What `explain` adds when the backend does not isolate like a container (`note`). */
  readonly isolationNote?: string;
  /** The note when it depends on the settings (an isolation the operator turned off); wins over `isolationNote`. */
  isolationNoteFor?(settings: S): string | undefined;
  /** Where its sandboxes run when that is another machine (`root@build1:22`), for `explain` (`host`). */
  host?(settings: S): string;
  /**
   * The most memory and disk one sandbox of these settings may take (its limits, or the backend's
   * defaults for them), counted against its tenant's `limits.memoryMb` and `limits.diskMb`.
   * Absent: its sandboxes have no such bound, and only `limits.sandboxes` counts them.
   */
  reservation?(settings: S): SandboxReservation;
  /**
   * Where berth can group its sandboxes' processes in the kernel (a cgroup per command, see
   * backends/cgroups), so a timeout ends whatever a command started: `host` when they run on
   * berth's host (as root), `engine` when they do if its engine runs there too. Absent: never (a
   * remote host, a cluster); a command's processes are then found by the tags berth gives them.
   */
  readonly processGroups?: 'host' | 'engine';
  readonly words: SandboxWords;
  /**
   * The starting dir inside a sandbox when nothing else applies; known without contacting
   * anything. `dirName` is the identity's readable dir name, `digest` its sha256 (for names that
   * must be short, such as an account), `settings` the module's merged section.
   */
  defaultCwd(where: { berthHome: string; dirName: string; digest: string; settings: S }): string;
  /** Creates the backend. Imports its implementation only when called (importing a module loads no engine client). */
  create(ctx: BackendContext): Promise<Backend>;
}

/** Identity, with the name, settings and section types inferred (the registry's typed sections). */
export function defineBackend<const N extends string, S = undefined, Shape extends z.core.$ZodLooseShape = z.core.$ZodLooseShape>(
  module: Omit<BackendModule<N, S>, 'settings'> & { readonly settings?: SettingsSection<S, Shape> },
): BackendModule<N, S> {
  return module as BackendModule<N, S>;
}

/** What one sandbox of `settings` reserves on its module (nothing for a module without bounds). */
export function reservationOf(module: BackendModule, settings: object): SandboxReservation {
  return module.reservation?.(sectionOf(module, settings)) ?? {};
}

/** The `note` explain gives for `module` with these settings (each module's section under its name). */
export function isolationNoteOf(module: BackendModule, settings: object): string | undefined {
  return module.isolationNoteFor?.(sectionOf(module, settings)) ?? module.isolationNote;
}

/** The section type a module's settings have (`undefined` for a module without a section). */
export type SectionOf<M> = M extends BackendModule<string, infer S> ? S : never;

/** A module's section of `settings` (which holds every module's section by its name). */
export function sectionOf<S>(module: BackendModule<string, S>, settings: object): S {
  return (settings as Record<string, unknown>)[module.name] as S;
}

/** `settings` with `module`'s section replaced. */
export function withSection<T extends object, S>(settings: T, module: BackendModule<string, S>, section: S): T {
  return { ...settings, [module.name]: section };
}
