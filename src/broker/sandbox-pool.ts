import { existsSync } from 'node:fs';
import type { Backend, Sandbox } from '../backends/backend.js';
import { reservationOf, sectionOf } from '../backends/module.js';
import type { BerthConfig } from '../setup/berth-config.js';
import { PolicyRefusedError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import { ownerToken } from '../kit/process-owner.js';
import type { ResolvedCall } from './resolve-call.js';
import { claimOrAwait } from './sandbox-claim.js';
import type { BackendByName } from './sandbox-removal.js';
import { SandboxShells } from './shell-pool.js';
import type { StartGate } from './start-gate.js';
import type { SandboxRecord, SandboxTable, TenantQuota } from './state/sandbox-table.js';
import type { WarmClaim, WarmPool } from './warm-pool.js';

type Claim = Awaited<ReturnType<typeof claimOrAwait>>;

/** What the pool asks of the session links: a call got its sandbox, so its session is linked to it. */
export interface SessionLinker {
  link(call: ResolvedCall, live: LiveSandbox): void;
}

/** What the pool asks of the reapers: the first orphan pass on an engine a call (or a warm pool) is about to use. */
export interface FirstUseOfEngine {
  reapOrphansOnce(engine: string): Promise<void>;
}

/** What the pool asks of the removal part: drop a sandbox recorded under a backend its identity no longer resolves to. */
export interface SandboxRetirer {
  retire(rec: SandboxRecord, live: LiveSandbox | undefined): Promise<void>;
}

export interface SandboxPoolOptions {
  config: BerthConfig;
  lives: Pick<LiveSandboxes, 'get' | 'add' | 'backendOf' | 'underLock'>;
  backends: BackendByName;
  sandboxes: Pick<SandboxTable, 'get' | 'put' | 'delete' | 'claim' | 'tenantUsage' | 'takeOverClaim' | 'hold' | 'takeReaped'>;
  links: SessionLinker;
  firstUse: FirstUseOfEngine;
  removal: SandboxRetirer;
  warm: Pick<WarmPool, 'start' | 'claim'>;
  /** Keep the warm pools the config asks for (a long-lived broker): calls may be served from them. */
  warmPool: boolean;
  /** What one tenant's sandboxes may add up to (limits.sandboxes, memoryMb, diskMb). */
  quota: TenantQuota;
  /** Bounds the sandboxes created or adopted at once (shared with the shell pool's starts). */
  gate: StartGate;
  /** limits.liveSandboxes: room for one more live sandbox, made by hibernating an idle one. */
  cap: { reserve(key: string, waitMs: number): Promise<() => void> };
  /** berth's egress proxy listens in a sandbox that uses it before the sandbox is live. */
  egress: { attach(call: ResolvedCall, sandbox: Sandbox): Promise<void> };
  log: Logger;
}

/**
 * Get-or-create of each call's sandbox: under the identity's lock and the cross-process claim, from
 * a warm pool or created (or reattached, or recreated) by its backend, checked once per profile and
 * image; then held as live and linked to the call's session.
 */
export class SandboxPool {
  /** Backend, profile and image combinations: the check made (or under way) for each. */
  private readonly checkedKeys = new Map<string, Promise<void>>();
  /** This process (`pid:starttime`), on the creation claims it makes. */
  private readonly processToken = ownerToken();

  constructor(private readonly opts: SandboxPoolOptions) {}

  /**
   * A long-lived broker's start: checks the warm pools the config asks for and starts filling
   * them, and starts the first orphan pass on their engines (not waited for), so the pool
   * sandboxes of a broker that died or of a shape no longer configured go now, not at the first call.
   */
  async startWarmPools(): Promise<void> {
    for (const engine of await this.opts.warm.start()) void this.opts.firstUse.reapOrphansOnce(engine);
  }

  /** Get-or-create under the identity's lock: concurrent first calls create one sandbox. */
  acquire(call: ResolvedCall): Promise<LiveSandbox> {
    const { lives, links } = this.opts;
    const existing = lives.get(call.spec.digest);
    if (existing !== undefined && lives.backendOf(existing).name === call.settings.backend) {
      // Hot path: no lock and no store write unless this session is new to the sandbox.
      this.assertMountFits(call, existing.record);
      links.link(call, existing);
      return Promise.resolve(existing);
    }
    return lives.underLock(call.spec.digest, async () => {
      const raced = lives.get(call.spec.digest);
      if (raced !== undefined && lives.backendOf(raced).name === call.settings.backend) {
        links.link(call, raced);
        return raced;
      }
      const { sandboxes } = this.opts;
      let known = sandboxes.get(call.spec.digest);
      if (known !== undefined && known.backend !== call.settings.backend) {
        // The config (or a task override) moved this identity to another backend: the ref on
        // record means nothing to the new backend (a local dir is no container id).
        await this.opts.removal.retire(known, raced);
        known = undefined;
      }
      const backend = await this.backendFor(call);
      // A call waits for room as long as it would wait for its command.
      const room = await this.opts.cap.reserve(call.binding.sandboxKey, call.settings.exec.timeoutSeconds * 1000);
      try {
        return await this.bringUp(call, backend, known);
      } finally {
        room();
      }
    });
  }

  /** Creates, reattaches or resumes the call's sandbox (or takes one from a warm pool) and holds it as live. */
  private async bringUp(call: ResolvedCall, backend: Backend, known: SandboxRecord | undefined): Promise<LiveSandbox> {
    const { lives, links, sandboxes } = this.opts;
    const { claim, sandbox, warm } = known === undefined && this.mayBeWarm(call)
      ? await this.fromWarmPool(call, backend)
      // The claim is made inside the gate: a claim's age tells other processes whether its maker
      // died, so it must not age in a queue.
      : await this.opts.gate.run(async () => {
        const c = await claimOrAwait(sandboxes, this.processToken, call, backend.name, known, this.limitsOf(call));
        this.assertMountFits(call, c.record);
        return { claim: c, sandbox: await this.ensureClaimed(call, backend, c), warm: undefined };
      });
    await this.attachEgress(call, claim, sandbox, backend);
    const now = Date.now();
    const record: SandboxRecord = {
      ...claim.record, ref: sandbox.ref, name: sandbox.name, hostDir: sandbox.hostDir ?? null, lastUsedMs: now,
      hibernatedMs: null, heldBy: this.processToken,
    };
    const hibernatedMs = known?.hibernatedMs ?? null;
    // A reaper took this identity's sandbox from a session still open: this one is new and empty.
    const reaped = known === undefined && sandboxes.takeReaped(call.spec.digest);
    sandboxes.put(record);
    sandboxes.hold(record.digest, this.processToken);
    warm?.recorded();
    const live: LiveSandbox = {
      digest: call.spec.digest, sandbox, record, traits: call.traits,
      idleMs: call.settings.lifecycle.idleSeconds * 1000, hibernateMs: call.settings.lifecycle.hibernateSeconds * 1000,
      inflight: 0, lastActivityMs: now, recreatedUnreported: sandbox.recreated || reaped, sessions: new Map(), diskCheckedMs: 0,
      resumedUnreported: hibernatedMs !== null && !sandbox.recreated ? { hibernatedMs } : undefined,
      shells: new SandboxShells(sandbox, {
        mayKillAll: call.traits.ownsProcessTable,
        log: this.opts.log.child('berth:shell').with({ key: call.binding.sandboxKey, ref: sandbox.ref }),
        warden: warm?.warden, preattached: warm?.shell,
      }),
    };
    lives.add(live, backend);
    links.link(call, live);
    return live;
  }

  /**
   * berth's egress proxy listens in the sandbox before it is live. When it cannot, the claim this
   * call made goes (left behind it would hold the identity) and an ephemeral sandbox with it;
   * a recorded or persistent one stays for the next call to try again.
   */
  private async attachEgress(call: ResolvedCall, claim: Claim, sandbox: Sandbox, backend: Backend): Promise<void> {
    try {
      await this.opts.egress.attach(call, sandbox);
    } catch (err) {
      if (claim.mine) {
        // An ephemeral one goes; a persistent one keeps its files (the next call adopts it again).
        if (call.spec.ephemeral) {
          await backend.remove(sandbox.ref, sandbox.hostDir).catch((e: unknown) => this.opts.log.warn(`remove ${call.binding.sandboxKey} after its egress failed: ${String(e)}`));
        }
        this.opts.sandboxes.delete(call.spec.digest);
      }
      throw err;
    }
  }

  /** A job's sandbox if it still exists (live, or recorded and reattached); never creates one. */
  async existing(call: ResolvedCall | undefined, digest: string): Promise<Sandbox | undefined> {
    const live = this.opts.lives.get(digest);
    if (live !== undefined) return live.sandbox;
    const rec = this.opts.sandboxes.get(digest);
    if (rec === undefined || rec.ref === '' || call === undefined || call.settings.backend !== rec.backend) return undefined;
    const backend = await this.opts.backends.get(rec.backend);
    if (call.traits.listsByLabel) {
      if (!(await backend.listManaged()).some((m) => m.ref === rec.ref)) return undefined;
    } else if (rec.hostDir === null || !existsSync(rec.hostDir)) {
      return undefined;
    }
    return (await this.acquire(call)).sandbox;
  }

  /** A new sandbox of `call` counts against its tenant's quota with what its backend lets it take. */
  private limitsOf(call: ResolvedCall): { quota: TenantQuota; reserves: ReturnType<typeof reservationOf> } {
    return { quota: this.opts.quota, reserves: reservationOf(this.opts.config.backends.module(call.settings.backend), call.settings) };
  }

  /** A call a warm pool may serve: a new ephemeral sandbox without a host mount, of a profile with a pool. */
  private mayBeWarm(call: ResolvedCall): boolean {
    return this.opts.warmPool && call.settings.warmPool.size > 0 && call.spec.ephemeral && call.spec.mount === null;
  }

  /**
   * The creation claim, then a sandbox from the warm pool when the claim is this process's; when
   * the pool cannot serve it (empty, the claim failed), a sandbox created the usual way on the
   * same backend. Outside the gate: a claim starts nothing (and a creation claim names its
   * process, so on a miss its wait in the gate's queue never makes it look abandoned).
   */
  private async fromWarmPool(call: ResolvedCall, backend: Backend): Promise<{ claim: Claim; sandbox: Sandbox; warm: WarmClaim | undefined }> {
    const { sandboxes } = this.opts;
    const claim = await claimOrAwait(sandboxes, this.processToken, call, backend.name, undefined, this.limitsOf(call));
    this.assertMountFits(call, claim.record);
    if (claim.mine) {
      let warm: WarmClaim | undefined;
      try {
        warm = await this.opts.warm.claim(backend, call.settings, call.spec);
      } catch (err) {
        sandboxes.delete(call.spec.digest);
        throw err;
      }
      if (warm !== undefined) return { claim, sandbox: warm.sandbox, warm };
    }
    return { claim, sandbox: await this.opts.gate.run(() => this.ensureClaimed(call, backend, claim)), warm: undefined };
  }

  /** `ensure` under a creation claim; a failure drops the claim this process made. */
  private async ensureClaimed(call: ResolvedCall, backend: Backend, claim: Claim): Promise<Sandbox> {
    try {
      return await backend.ensure(call.spec, claim.mine ? undefined : claim.record.ref);
    } catch (err) {
      if (claim.mine) this.opts.sandboxes.delete(call.spec.digest);
      throw err;
    }
  }

  /** The call's backend, checked for the call's profile and image the first time they meet (then the engine's first orphan pass). */
  private async backendFor(call: ResolvedCall): Promise<Backend> {
    const backend = await this.opts.backends.get(call.settings.backend);
    const module = this.opts.config.backends.module(call.settings.backend);
    const image = module.images === undefined ? '' : module.images.of(sectionOf(module, call.settings));
    const checkKey = `${call.settings.backend}:${call.scope.profile}:${image}:${call.spec.egress?.mode ?? 'open'}`;
    // One check per key however many first calls arrive at once (a burst of resumes after a
    // restart asked the engine once per call); a failed check is asked again by the next call.
    let checking = this.checkedKeys.get(checkKey);
    if (checking === undefined) {
      checking = backend.check(call.spec.section, call.spec.egress);
      this.checkedKeys.set(checkKey, checking);
      checking.catch(() => this.checkedKeys.delete(checkKey));
    }
    await checking;
    await this.opts.firstUse.reapOrphansOnce(call.settings.backend);
    return backend;
  }

  private assertMountFits(call: ResolvedCall, known: SandboxRecord): void {
    if (call.spec.mount !== null && known.mount !== call.spec.mount) {
      throw new PolicyRefusedError(
        `sandbox "${call.binding.sandboxKey}" already mounts ${known.mount ?? 'no workspace'} at /workspace, not ${call.spec.mount}; ` +
        'a mount is fixed when the sandbox is created: use the same workspace, or remove the sandbox first (berth rm with the same scope flags)');
    }
  }
}
