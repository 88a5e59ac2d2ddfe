import { BerthError, SandboxNotFoundError } from '../errors.js';
import { mapWorkdir } from '../policy/cwd.js';
import { resumeReport } from './resume-report.js';
import type { BrokerExecResult, ExecOptions } from './broker-types.js';
import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import type { ResolvedCall } from './resolve-call.js';
import type { SandboxRecovery } from './sandbox-recovery.js';
import type { SessionCall } from './session-calls.js';
import type { SessionGate } from './session-gate.js';
import type { ShellPool } from './shell-pool.js';
import type { Logger } from '../logging/logger.js';

/** A line's options as the broker's parts give them: an exec's, and a job's group (see `RunOptions.group`). */
export type LineOptions = ExecOptions & { group?: string };

export interface CommandRunnerOptions {
  /** Registers each command as a call of its session and gets its sandbox. */
  gate: Pick<SessionGate, 'run' | 'acquire'>;
  lives: Pick<LiveSandboxes, 'get' | 'enter' | 'leave' | 'forget'>;
  shells: Pick<ShellPool, 'shellFor' | 'wardenLater' | 'commandDone' | 'recordCwd'>;
  recovery: Pick<SandboxRecovery, 'outOfBandState' | 'startedAgainNotice' | 'outOfProcesses' | 'restart'>;
  /** Set once the broker began to close: nothing is re-ensured or restarted after that. */
  shutdown: AbortSignal;
  log: Logger;
}

/**
 * Runs one shell line through the call's persistent shell, and recovers what can be recovered
 * once: a sandbox removed or stopped out of band is ensured again, a container whose pids a fork
 * bomb took is restarted. The path of every command (`broker.exec`, a job's start line).
 */
export class CommandRunner {
  constructor(private readonly opts: CommandRunnerOptions) {}

  /**
   * Runs `command` in the call's sandbox as one call of its session (`exec`, and the start line of
   * a job). `facts.cold` is set when the call had to bring its sandbox up in this process.
   */
  async run(call: ResolvedCall, command: string, opts: LineOptions, facts: { cold: boolean } = { cold: false }): Promise<BrokerExecResult> {
    const timeoutMs = Math.round((opts.timeoutSeconds ?? call.settings.exec.timeoutSeconds) * 1000);
    const workdir = opts.workdir === undefined ? undefined
      : mapWorkdir(opts.workdir, { containerBackend: call.traits.mountsHostDirs, mount: call.spec.mount });
    return this.opts.gate.run(call, (sc) => this.runInSandbox(call, sc, command, { ...opts, timeoutMs, workdir }, facts));
  }

  private async runInSandbox(
    call: ResolvedCall, sc: SessionCall, command: string, opts: LineOptions & { timeoutMs: number }, facts: { cold: boolean },
  ): Promise<BrokerExecResult> {
    const { gate, lives, shells, recovery, shutdown, log } = this.opts;
    const { timeoutMs, workdir } = opts;
    let gone = false;
    let restarted: string | undefined;
    for (let attempt = 0; ; attempt++) {
      if (lives.get(call.spec.digest) === undefined) facts.cold = true;
      const live: LiveSandbox = await gate.acquire(call, sc);
      lives.enter(live);
      let lazyWarden: NodeJS.Timeout | undefined;
      try {
        const ls = await shells.shellFor(call, live.shells);
        lazyWarden = shells.wardenLater(live.shells);
        const r = await ls.shell.run(command, { timeoutMs, workdir, stdin: opts.stdin, onChunk: opts.onChunk, signal: opts.signal, group: opts.group });
        if (live.diskBreach) throw live.diskBreach;
        shells.commandDone(live.shells);
        shells.recordCwd(call, ls, r);
        let out: BrokerExecResult = restarted === undefined ? { ...r, sandboxKey: call.binding.sandboxKey }
          : { ...r, stderr: restarted + r.stderr, output: restarted + r.output, sandboxKey: call.binding.sandboxKey };
        // The command ended (timed out) and no new shell could start after it: free the sandbox now.
        const full = ls.shell.hasShell || shutdown.aborted ? undefined : await recovery.outOfProcesses(live);
        if (full !== undefined) {
          const notice = await recovery.restart(call, live, full);
          opts.onChunk?.('stderr', notice);
          out = { ...out, stderr: out.stderr + notice, output: out.output + notice };
        }
        // Reported once, on the call that found the sandbox gone.
        if (live.recreatedUnreported || gone) out.sandboxRecreated = true;
        live.recreatedUnreported = false;
        if (live.resumedUnreported !== undefined) {
          out.sandboxResumed = resumeReport(live.resumedUnreported.hibernatedMs, ls.shell.loadedSavedState, live.sandbox.volatileDirs ?? []);
          live.resumedUnreported = undefined;
        }
        return out;
      } catch (err) {
        // The sandbox vanished (or was stopped) out of band between calls: re-ensure once (a
        // removed one is recreated and the result says so; a stopped one is just started). A
        // backend may report the missing container only as a failed shell start, so ask the engine.
        // A call overtaken by its session's close never recreates what the close removed.
        if (err === live.diskBreach) throw err;
        const state = attempt > 0 || shutdown.aborted || sc.overtaken ? undefined
          : err instanceof SandboxNotFoundError ? 'gone' : await recovery.outOfBandState(live);
        if (state !== undefined) {
          log.child('berth:broker').info(`sandbox ${call.binding.sandboxKey} is ${state}; re-ensuring it once`);
          gone = state === 'gone';
          if (state === 'stopped') {
            restarted = recovery.startedAgainNotice(call, live);
            opts.onChunk?.('stderr', restarted);
          }
          await lives.forget(live);
          continue;
        }
        const startFailed = err instanceof BerthError && (err.code === 'shell_start_failed' || err.code === 'timeout');
        const full = attempt > 0 || shutdown.aborted || !startFailed ? undefined : await recovery.outOfProcesses(live);
        if (full !== undefined) {
          restarted = await recovery.restart(call, live, full);
          opts.onChunk?.('stderr', restarted);
          continue;
        }
        throw err;
      } finally {
        clearTimeout(lazyWarden);
        lives.leave(live);
      }
    }
  }
}
