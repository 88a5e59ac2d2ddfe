import type * as z from 'zod';
import type { BackendTraits } from '../config/backend-traits.js';
import type { SettingsSection } from '../config/section.js';
import type { Logger } from '../logging/logger.js';
import type { Backend, Lease } from './backend.js';

/** What a module's factory gets from the composition root. */
export interface BackendContext<S = unknown> {
  berthHome: string;
  installation: string;
  /** This backend's logger (`berth:<name>`); never given a secret value. */
  log: Logger;
  /** Serialises engine-object creation across this installation's processes. */
  lease: Lease;
  /**
   * The module's merged section of each place of the config that uses it (top level first, then
   * each profile), for a backend that may reach more than one engine, named in its settings (an
   * SSH host, a cluster): it finds its sandboxes there (reapers, `listManaged`) before any call
   * reached it. Absent: only what its calls bring.
   */
  places?: readonly S[];
}

/** What `berth image build` asks of a module that builds or pulls its sandboxes' images into its engine. */
export interface ImageRequest {
  image: string;
  variant: 'debian' | 'minimal';
  /** Build again even when the image exists. */
  force: boolean;
  /** One line per step, for a terminal's progress view. */
  onProgress: (line: string) => void;
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
  /**
   * Its sandboxes run an image: task overrides may set one (elsewhere an image override is
   * refused). `provide` builds or pulls one into the engine (`berth image build`), loading the
   * engine client only when called.
   */
  readonly images?: {
    of(settings: S): string;
    with(settings: S, image: string): S;
    provide?(request: ImageRequest): Promise<{ action: 'built' | 'pulled' | 'reused' }>;
  };
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
   * berth's host (as root), `engine` when they do if its engine runs there too, `remote` when a
   * root helper of berth's does it on the sandbox's own host (ssh; the host probe refuses a host
   * without it). Absent: never (a cluster); a command's processes are then found by the tags
   * berth gives them.
   */
  readonly processGroups?: 'host' | 'engine' | 'remote';
  /**
   * Ranges its sandboxes of these settings never reach besides the always-denied ones, which
   * berth's egress proxy refuses too (the label names the setting in each refusal). Absent: none.
   */
  egressDenied?(settings: S): readonly { cidr: string; label: string }[];
  readonly words: SandboxWords;
  /**
   * The starting dir inside a sandbox when nothing else applies; known without contacting
   * anything. `dirName` is the identity's readable dir name, `digest` its sha256 (for names that
   * must be short, such as an account), `settings` the module's merged section.
   */
  defaultCwd(where: { berthHome: string; dirName: string; digest: string; settings: S }): string;
  /** Creates the backend. Imports its implementation only when called (importing a module loads no engine client). */
  create(ctx: BackendContext<S>): Promise<Backend<S>>;
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

/** The ranges the egress proxy refuses to sandboxes of `module` with these settings, besides the always-denied ones. */
export function egressDeniedOf(module: BackendModule, settings: object): readonly { cidr: string; label: string }[] {
  return module.egressDenied?.(sectionOf(module, settings)) ?? [];
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
