import * as z from 'zod';
import { absolutePath, bool, FULL, oneOf, positiveInteger } from '../../config/zod-kit.js';
import { mergeWritten, type SectionUse, type SettingsSection } from '../../config/section.js';
import { checkUidRange, type UidRange } from './uid-claims.js';

/*
 * The `bwrap:` config section (top level and per profile). Every key optional; the defaults are
 * here, and a profile's keys replace the top level's (`mergeWritten`).
 */

/** Settings of the bubblewrap backend. */
export interface BwrapSettings {
  /** The bwrap binary: an absolute path, or a name looked up on PATH. */
  path: string;
  /**
   * Where sandbox dirs and uid claims live. Outside `$BERTH_HOME`: bwrap resolves binds as the
   * sandbox's uid, so the root and its ancestors must be traversable (0711), which berth's home
   * (0700) is not. Undefined: `defaultBwrapRoot()`.
   */
  root: string | undefined;
  /** Host uids berth may give sandboxes, one each (berth as root only). */
  uids: UidRange;
  network: 'none' | 'host';
  /** false only as the operator's explicit opt-out of the syscall filter. */
  seccomp: boolean;
  /** Size of each of the sandbox's /tmp and /dev/shm (memory). */
  tmpSizeMb: number;
  /** Processes and threads one sandbox may hold (RLIMIT_NPROC in its own namespace). */
  maxProcesses: number;
}

/*
 * Above systemd's container range (524288..1879048191) and below 2^31: no account or container
 * manager of a usual host hands these out.
 */
export const DEFAULT_UIDS: UidRange = { first: 2_000_000_000, count: 65_536 };

/** The root berth uses when `bwrap.root` is unset. */
export function defaultBwrapRoot(uid: number = process.getuid?.() ?? 0): string {
  return uid === 0 ? '/var/lib/berth-bwrap' : `/tmp/berth-bwrap-${uid}`;
}

const uidsShape = z
  .strictObject(
    {
      first: z.number({ error: 'an integer uid' }).int({ error: 'an integer uid' }),
      count: z.number({ error: 'a positive integer' }).int({ error: 'a positive integer' }).positive({ error: 'a positive integer' }),
    },
    { error: 'a mapping {first, count} of host uids berth may give sandboxes' },
  )
  .superRefine((r, ctx) => {
    const problem = checkUidRange(r);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: `a uid range no account uses: ${problem}`, params: FULL });
  })
  .optional();

const bwrapShape = {
  path: z.string({ error: 'the bwrap binary (an absolute path or a name on PATH)' })
    .refine((p) => p.startsWith('/') ? !p.split('/').includes('..') : /^[A-Za-z0-9._+-]+$/.test(p), {
      error: 'the bwrap binary: an absolute path without ".." segments, or a plain name looked up on PATH',
    })
    .optional(),
  root: absolutePath('the dir that holds bwrap sandboxes').optional(),
  uids: uidsShape,
  network: oneOf(['none', 'host']),
  seccomp: bool(),
  tmpSizeMb: positiveInteger(),
  maxProcesses: positiveInteger(),
};

/**
 * What a place asks that its bwrap sandboxes cannot give: credentials in egress mode open need
 * berth's proxy listening in the sandbox's own network namespace, and `network: host` has none (a
 * listener there would serve every process of the host). Allowlist and none sandboxes get a
 * namespace of their own whatever `network` says.
 */
function bwrapUseProblems(uses: readonly SectionUse<BwrapSettings>[]): string[] {
  return uses
    .filter((u) => u.settings.network === 'host' && u.egress.mode === 'open' && u.egress.proxied)
    .map((u) => `config key "${u.at}.network": "host" shares this host's network namespace, where berth's egress proxy cannot listen for one sandbox, ` +
      'and credentials reach their hosts only through that proxy; set network: none with egress.mode: allowlist (the sandbox gets a namespace of its own), or remove the credentials');
}

/** The `bwrap:` section of the config: its keys, defaults, merge and rules. */
export const bwrapSettings: SettingsSection<BwrapSettings, typeof bwrapShape> = {
  shape: bwrapShape,
  defaults: () => ({
    path: 'bwrap',
    root: undefined,
    uids: { ...DEFAULT_UIDS },
    network: 'none',
    seccomp: true,
    tmpSizeMb: 256,
    maxProcesses: 1024,
  }),
  merge: (base, written) => mergeWritten(base, written, { uids: (w) => ({ first: w.first, count: w.count }) }),
  problems: bwrapUseProblems,
  // Claims keep two sandboxes from sharing a uid only within one root; the reapers list one root.
  installationWide: ['root', 'uids'],
};
