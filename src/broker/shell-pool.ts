import type { Sandbox } from '../backends/backend.js';
import type { ShellTransport } from '../shell/transport.js';
import type { Logger } from '../logging/logger.js';
import { PersistentShell } from '../shell/persistent-shell.js';
import type { ExecResult } from '../shell/types.js';
import { wardenFor, type Warden } from '../shell/warden.js';
import type { ResolvedCall } from './resolve-call.js';
import { recordedStartCwd, type CwdLookup } from './start-cwd.js';
import type { StartGate } from './start-gate.js';
import type { ScopeRecords } from './state/scope-records.js';
import { withSessionEnv } from './preattached-shell.js';

/** A CLI process starts a sandbox's warden once a command has run this long. */
const WARDEN_AFTER_MS = 300;

/** One persistent shell of a sandbox, and whose it is. */
export interface LiveShell {
  shell: PersistentShell;
  tenant: string;
  profile: string;
  sessionRef: string;
  /** The cwd last written to the store for this shell identity (skip rewriting the same value). */
  recordedCwd: string | undefined;
}

/**
 * The persistent shells of one sandbox, by shell identity, and its warden. Lives as long as the
 * sandbox is live in this process (see `LiveSandbox.shells`).
 */
export class SandboxShells {
  readonly byShell = new Map<string, Promise<LiveShell>>();
  /** Ends process trees in the sandbox without a new process there (when it starts: `ShellPool`). */
  readonly warden: Warden;
  /** This process asked its warden to start (once; it reopens itself at its next use if it died). */
  wardenAsked = false;
  readonly log: Logger;
  /** A bash started before the sandbox had an owner (warm pool): the first shell opened takes it. */
  private preattached: ShellTransport | undefined;

  /**
   * @param opts.log `berth:shell`, about this sandbox (its key and ref): its shells and warden log there.
   * @param opts.warden its warden when one was started already (a warm-pool sandbox).
   * @param opts.preattached a bash attached with the sandbox's base environment only (a warm-pool sandbox).
   */
  constructor(readonly sandbox: Sandbox, opts: { mayKillAll: boolean; log: Logger; warden?: Warden | undefined; preattached?: ShellTransport | undefined }) {
    this.log = opts.log;
    this.preattached = opts.preattached;
    this.warden = opts.warden ?? wardenFor(sandbox, { mayKillAll: opts.mayKillAll, log: opts.log });
  }

  /**
   * Opens a shell with `env` (the granted environment and the shell's tag): the pre-attached bash
   * when there is one, told `env` on its stdin, else a new process with `env` as its environment.
   */
  async openShell(env: Readonly<Record<string, string>>): Promise<ShellTransport> {
    const pre = this.preattached;
    this.preattached = undefined;
    if (pre !== undefined) {
      const t = withSessionEnv(pre, env);
      if (t !== undefined) return t;
      await pre.kill();
    }
    return this.sandbox.openShell({ env, cwd: this.sandbox.defaultCwd });
  }

  /** Whether a shell runs a command or a background job runs (see `hasBackgroundJobs`): the idle reaper leaves such a sandbox. */
  async busy(): Promise<boolean> {
    const shells = await this.settled();
    return shells.some((s) => s?.shell.busy === true) || this.jobsIn(shells);
  }

  /**
   * Whether a background job runs: one a shell reported after its last command, or, where the
   * sandbox's command groups can be read from berth's host, any process a command left running
   * outside its shell's job table (`(cmd &)`, `setsid`, `disown`, a daemon); not a shell, this
   * process's (by host pid) or another's (`SandboxCgroups.commandsRunning`). It may write to disk
   * between calls, and a hibernation would kill it.
   */
  async hasBackgroundJobs(): Promise<boolean> {
    return this.jobsIn(await this.settled());
  }

  private jobsIn(shells: Array<LiveShell | undefined>): boolean {
    if (shells.some((s) => s !== undefined && s.shell.backgroundJobCount() > 0)) return true;
    const groups = this.sandbox.processGroups;
    if (groups?.commandsRunning === undefined) return false;
    const own = new Set<number>();
    for (const s of shells) {
      const pid = s?.shell.hostPid;
      if (pid !== undefined) own.add(pid);
    }
    try {
      return groups.commandsRunning(own);
    } catch (err) {
      // Unreadable counts as running, as a job whose state cannot be read does: nothing is killed on a guess.
      this.log.debug(`could not read the sandbox's command groups: ${String(err)}`);
      return true;
    }
  }

  /** Closes the shells of one session (a session's close). */
  async closeSession(tenant: string, profile: string, sessionRef: string): Promise<void> {
    for (const [key, p] of this.byShell) {
      const ls = await p.catch(() => undefined);
      if (ls && ls.tenant === tenant && ls.profile === profile && ls.sessionRef === sessionRef) {
        this.byShell.delete(key);
        await ls.shell.close();
      }
    }
  }

  /** Closes every shell and the warden (the sandbox is dropped from memory). */
  async close(): Promise<void> {
    await this.preattached?.kill();
    this.preattached = undefined;
    const shells = [...this.byShell.values()];
    this.byShell.clear();
    await Promise.all(shells.map(async (p) => {
      const ls = await p.catch(() => undefined);
      await ls?.shell.close();
    }));
    await this.warden.close();
  }

  private settled(): Promise<Array<LiveShell | undefined>> {
    return Promise.all([...this.byShell.values()].map((p) => p.catch(() => undefined)));
  }
}

export interface ShellPoolOptions {
  /** Where each shell identity's commands left it, read when a shell starts and written after each command. */
  scopes: CwdLookup & Pick<ScopeRecords, 'putCwd'>;
  /** This process holds its sessions (a library or server): it lives long, so wardens start early. */
  longLived: boolean;
  /** Where shells keep the full output of a command over `exec.maxOutputChars`; undefined: nowhere. */
  spillDir: string | undefined;
  /** Bounds the shells and wardens starting at once (shared with the sandbox pool's creations). */
  gate: StartGate;
}

/** Starts the persistent shell of each call's shell identity, and records where its commands leave it. */
export class ShellPool {
  constructor(private readonly opts: ShellPoolOptions) {}

  /** The call's shell in `shells`' sandbox: the running one, or a new one in the recorded cwd. */
  shellFor(call: ResolvedCall, shells: SandboxShells): Promise<LiveShell> {
    const existing = shells.byShell.get(call.shell.digest);
    if (existing !== undefined) return existing;
    const sandbox = shells.sandbox;
    // A long-lived broker opens it with the sandbox's first shell, before a command could take
    // every pid there. Not waited for: a docker engine starts one exec at a time per container,
    // so waiting would add a whole exec to the first call; a bomb that wins the race is handled
    // by the sandbox restart. Where the kernel's groups end the sandbox's commands, a bomb needs
    // no warden to end: it starts once the first command answered (see commandDone), not beside
    // the first shell, whose start and command it slowed (on bwrap: two forks and a bash in the
    // sandbox, ~10 ms of a resume's first answer). A CLI process opens it only for a slow command
    // (see wardenLater): it lives for one command, and a fast one should not pay for it.
    if (this.opts.longLived && sandbox.processGroups === undefined) this.startWarden(shells);
    const p = this.opts.gate.run(() => PersistentShell.start({
      open: (extra) => shells.openShell({ ...call.env, ...extra }),
      execOnce: (argv, o) => sandbox.execOnce(argv, o),
      killer: shells.warden,
      groups: sandbox.processGroups,
      stateDir: sandbox.stateDir,
      shellId: call.shell.fileStem,
      defaultCwd: call.defaultCwd,
      initialCwd: recordedStartCwd(this.opts.scopes, call),
      secretNames: call.secretNames,
      spillDir: this.opts.spillDir,
      maxOutputChars: call.settings.exec.maxOutputChars,
      redactValues: call.redactValues,
      log: shells.log,
    })).then((shell): LiveShell => ({
      shell, tenant: call.scope.tenant, profile: call.scope.profile, sessionRef: call.sessionRef, recordedCwd: undefined,
    }));
    shells.byShell.set(call.shell.digest, p);
    p.catch(() => shells.byShell.delete(call.shell.digest));
    return p;
  }

  /** In a CLI process: the warden starts if the command runs past WARDEN_AFTER_MS (clear the timer when it ends). */
  wardenLater(shells: SandboxShells): NodeJS.Timeout | undefined {
    return this.opts.longLived ? undefined : setTimeout(() => void shells.warden.start(), WARDEN_AFTER_MS);
  }

  /** After a command answered: a long-lived process's warden starts now if it did not with the first shell. */
  commandDone(shells: SandboxShells): void {
    if (this.opts.longLived) this.startWarden(shells);
  }

  private startWarden(shells: SandboxShells): void {
    if (shells.wardenAsked) return;
    shells.wardenAsked = true;
    void this.opts.gate.run(() => shells.warden.start());
  }

  /**
   * After a command: the record follows the cwd the result reports, which is the shell's own
   * report after a completed command, or, after a timeout or a cancel, the cwd the new shell took
   * over in (the one its notice names, with the state it restored): a later process then starts
   * where this one's next command would run.
   */
  recordCwd(call: ResolvedCall, ls: LiveShell, r: ExecResult): void {
    if (r.cwd === '' || r.cwd === ls.recordedCwd) return;
    this.opts.scopes.putCwd(call.shell.digest, {
      tenant: call.scope.tenant, profile: call.scope.profile, session: call.scope.session ?? null, cwd: r.cwd, backend: call.settings.backend,
    }, Date.now());
    ls.recordedCwd = r.cwd;
  }
}
