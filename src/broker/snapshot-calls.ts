import { randomBytes } from 'node:crypto';
import type { Backend, Lease, Sandbox, SnapshotCapability } from '../backends/backend.js';
import { reservationOf } from '../backends/module.js';
import { BerthError, isBerthError, PolicyRefusedError, UnsupportedError, UsageError } from '../errors.js';
import type { CallScopeInput } from '../scope/call-scope.js';
import type { BerthConfig } from '../setup/berth-config.js';
import type { AuditRecorder } from './audit.js';
import type { CallResolver } from './call-resolver.js';
import { carryShellState } from './carry-shell-state.js';
import type { LiveSandboxes } from './live-sandboxes.js';
import { ownerToken } from '../kit/process-owner.js';
import type { ResolvedCall } from './resolve-call.js';
import { claimOrAwait } from './sandbox-claim.js';
import type { BackendByName } from './sandbox-removal.js';
import type { SessionGate } from './session-gate.js';
import { assertSnapshotName, infoOf, type ForkResult, type RestoreResult, type SnapshotInfo } from './snapshot-info.js';
import { busy, type SnapshotTaker } from './snapshot-taker.js';
import type { StartGate } from './start-gate.js';
import type { SandboxTable, TenantQuota } from './state/sandbox-table.js';
import type { ScopeRecords } from './state/scope-records.js';
import type { SessionTable } from './state/session-table.js';
import type { SnapshotRecord, SnapshotTable } from './state/snapshot-table.js';

export interface SnapshotCallsOptions {
  config: BerthConfig;
  resolver: Pick<CallResolver, 'resolve' | 'normalize'>;
  /** Registers each call as one of its session's and gets its sandbox. */
  gate: Pick<SessionGate, 'run' | 'acquire'>;
  lives: Pick<LiveSandboxes, 'get' | 'forget' | 'underLock'>;
  backends: BackendByName;
  sandboxes: Pick<SandboxTable, 'get' | 'put' | 'delete' | 'claim' | 'tenantUsage' | 'takeOverClaim' | 'markReplacing'>;
  sessions: Pick<SessionTable, 'open'>;
  snapshots: SnapshotTable;
  scopes: Pick<ScopeRecords, 'putCwd'>;
  /** Takes the snapshots (of an idle sandbox only) and says whether a sandbox may be replaced now. */
  taker: Pick<SnapshotTaker, 'take' | 'assertIdle' | 'assertNotHeldElsewhere'>;
  /** The egress listener of a sandbox a restore replaced goes with it. */
  egress: { detach(ref: string): Promise<void> };
  audit: Pick<AuditRecorder, 'record'>;
  /** Bounds sandbox creations at once (shared with the pool). */
  starts: Pick<StartGate, 'run'>;
  /** The tenant bounds on sandboxes (a fork makes one), host defaults filled in. */
  quota: TenantQuota;
  /** This process's token on the sessions it opens (a fork's new session), null when it holds none (the CLI). */
  owner: string | null;
  lifecycle: { assertOpen(): void };
  /**
   * The installation's lease across its processes (the state store's): a restore or fork from a
   * snapshot and its removal (rm, retention, the sweep) never overlap, in this process or another.
   */
  lease: Lease;
}

/**
 * Snapshots, restore and fork of a call's sandbox (`broker.snapshots`): the one place every surface
 * (library, CLI, HTTP, MCP) goes through. A snapshot is made with no command running, under the
 * identity's lock, after the sandbox's shells closed (their state saved in the sandbox, so the
 * snapshot carries cwd, exported variables, functions and aliases); it never holds a value of a
 * secret the call was granted. A restore or fork that fails leaves the sandbox and the snapshot as
 * they were and says so. Every action is audited.
 *
 * @example
 * await broker.snapshots.create({ session: 's1' }, { name: 'before-migration' });
 * await broker.snapshots.restore({ session: 's1' }, 'before-migration');
 * await broker.snapshots.fork({ session: 's1' }, { toSession: 's1-try-b' });
 */
export class SnapshotCalls {
  private readonly processToken = ownerToken();

  constructor(private readonly opts: SnapshotCallsOptions) {}

  /** Snapshots the call's sandbox now (brought up if it is not running); refused while a command runs in it. */
  async create(scope: CallScopeInput, a: { name?: string | undefined } = {}): Promise<SnapshotInfo> {
    this.opts.lifecycle.assertOpen();
    const call = this.opts.resolver.resolve(scope);
    const name = a.name ?? `snap-${new Date().toISOString().replace(/[-:]/g, '').replace(/\..*$/, '').replace('T', '-')}-${randomBytes(2).toString('hex')}`;
    return this.audited(call, `snapshot create ${name}`, async () => {
      assertSnapshotName(name);
      const caps = await this.capabilityOf(call);
      const rec = await this.opts.gate.run(call, async (sc) => {
        await this.opts.gate.acquire(call, sc);
        return this.opts.taker.take(call, caps, { name, kind: 'named', baseOf: null });
      });
      return infoOf(rec);
    });
  }

  /** The tenant a scope's calls belong to (its own, `BERTH_SESSION` and `runWithScope` applied). */
  tenantOf(scope: CallScopeInput): string {
    return this.opts.resolver.normalize(scope).tenant;
  }

  /**
   * The tenant's named snapshots, oldest first; of one sandbox's when `of` names a scope (its
   * tenant is the one listed).
   */
  list(tenant: string, of?: CallScopeInput): SnapshotInfo[] {
    this.opts.lifecycle.assertOpen();
    const digest = of === undefined ? undefined : this.opts.resolver.resolve({ ...of, tenant }).spec.digest;
    return this.opts.snapshots.list(tenant, digest).filter((r) => r.ref !== '').map(infoOf);
  }

  /** Removes a named snapshot of the call's sandbox; false when it has none of that name. */
  async remove(scope: CallScopeInput, name: string): Promise<boolean> {
    this.opts.lifecycle.assertOpen();
    const call = this.opts.resolver.resolve(scope);
    return this.audited(call, `snapshot rm ${name}`, async () => {
      assertSnapshotName(name);
      const snap = this.opts.snapshots.byName(call.scope.tenant, call.spec.digest, name);
      if (snap === undefined || snap.ref === '') return false;
      await this.removeSnapshot(snap);
      return true;
    });
  }

  /**
   * Puts the call's sandbox back to snapshot `name`: the snapshot is verified first, then a new
   * sandbox made from it replaces the current one (its shells restart from the snapshot's state,
   * the call's shell in the snapshot's cwd). On any failure both are as they were, and the error says so.
   */
  async restore(scope: CallScopeInput, name: string): Promise<RestoreResult> {
    this.opts.lifecycle.assertOpen();
    const call = this.opts.resolver.resolve(scope);
    return this.audited(call, `snapshot restore ${name}`, async () => {
      assertSnapshotName(name);
      const caps = await this.capabilityOf(call);
      const snap = this.namedSnapshot(call, name);
      const { lives, sandboxes } = this.opts;
      return this.opts.gate.run(call, () => lives.underLock(call.spec.digest, () => this.holding(snap, async () => {
        const live = lives.get(call.spec.digest);
        const untouched = `sandbox "${call.binding.sandboxKey}" and snapshot "${name}" are as they were`;
        if (live !== undefined) await this.opts.taker.assertIdle(call, live, 'restored');
        else {
          this.opts.taker.assertNotHeldElsewhere(call, 'restored');
          await this.assertNoneLeftRunning(call, untouched);
        }
        await caps.verify(snap.ref).catch((err: unknown) => {
          throw failed(`snapshot "${name}" cannot be restored`, err, untouched);
        });
        const rec = sandboxes.get(call.spec.digest);
        if (rec !== undefined && rec.ref === '') throw busy(call, 'restored', 'it is being created');
        if (live !== undefined) await lives.forget(live);
        let sandbox: Sandbox;
        // The new sandbox exists before the record names it: no orphan pass of any process may take it meanwhile.
        if (rec !== undefined) sandboxes.markReplacing(call.spec.digest, this.processToken);
        try {
          sandbox = rec === undefined
            ? await this.createFromSnapshot(call, caps, snap.ref)
            : await this.opts.starts.run(() => caps.createFrom(call.spec, snap.ref, { ref: rec.ref, hostDir: rec.hostDir ?? undefined }));
        } catch (err) {
          if (rec !== undefined) sandboxes.markReplacing(call.spec.digest, null);
          throw failed(`restoring snapshot "${name}" failed`, err, untouched);
        }
        if (rec !== undefined) {
          await this.opts.egress.detach(rec.ref);
          sandboxes.put({ ...rec, ref: sandbox.ref, name: sandbox.name, hostDir: sandbox.hostDir ?? null, lastUsedMs: Date.now() });
        }
        const cwd = await carryShellState(this.opts.scopes, call, sandbox, snap, call.defaultCwd);
        return { name, sandboxKey: call.binding.sandboxKey, cwd };
      })));
    });
  }

  /**
   * A sandbox no process holds may still run a process a command left there (`(cmd &)`, a daemon a
   * CLI call started): a restore replaces the sandbox and would end it unseen, so it is refused, as
   * for a held one. Where the backend cannot tell (ssh, kubernetes, a remote engine), nothing is refused.
   */
  private async assertNoneLeftRunning(call: ResolvedCall, untouched: string): Promise<void> {
    const rec = this.opts.sandboxes.get(call.spec.digest);
    if (rec === undefined || rec.ref === '') return;
    let running: boolean | undefined;
    try {
      running = await (await this.opts.backends.get(rec.backend)).commandsRunning?.(rec.ref);
    } catch (err) {
      throw failed(`could not tell whether a process still runs in sandbox "${call.binding.sandboxKey}"`, err, untouched);
    }
    if (running === true) throw busy(call, 'restored', 'a process a command left running (a daemon too) still runs in it');
  }

  /**
   * Makes session `toSession`'s sandbox from the call's sandbox as it is now (a base snapshot
   * made for it, kept until the forked sandbox goes), or from its named snapshot `from`; the new
   * session's shell starts in the source shell's cwd with its variables. Refused when `toSession`
   * resolves to the call's own sandbox (a scope shared across sessions) or already has one.
   */
  async fork(scope: CallScopeInput, a: { toSession: string; from?: string | undefined }): Promise<ForkResult> {
    this.opts.lifecycle.assertOpen();
    const call = this.opts.resolver.resolve(scope);
    const what = `fork --to-session ${a.toSession}${a.from === undefined ? '' : ` --from ${a.from}`}`;
    return this.audited(call, what, async () => {
      if (a.from !== undefined) assertSnapshotName(a.from);
      const target = this.opts.resolver.resolve({ ...scope, tenant: call.scope.tenant, session: a.toSession });
      if (target.scope.session === undefined) throw new UsageError('a fork needs --to-session S: the session the new sandbox is for');
      if (target.spec.digest === call.spec.digest) {
        throw new PolicyRefusedError(`session "${a.toSession}" resolves to the same sandbox "${call.binding.sandboxKey}" as the source ` +
          `(rule ${call.binding.rule}: one sandbox shared across sessions), so a fork would be the sandbox itself; ` +
          'fork from a profile whose sandboxes are kept per session (scope: session, or not persistent)');
      }
      const caps = await this.capabilityOf(call);
      if (this.opts.sandboxes.get(target.spec.digest) !== undefined) {
        throw new PolicyRefusedError(`session "${a.toSession}" already has sandbox "${target.binding.sandboxKey}"; ` +
          `close that session (berth close --session ${a.toSession}) or fork to a new one`);
      }
      const named = a.from === undefined ? undefined : this.namedSnapshot(call, a.from);
      const untouched = `sandbox "${call.binding.sandboxKey}" and its snapshots are as they were`;
      if (named !== undefined) {
        await caps.verify(named.ref).catch((err: unknown) => {
          throw failed(`snapshot "${named.name}" cannot be forked from`, err, untouched);
        });
      }
      // The new sandbox's record first: it claims the identity, and it names the base snapshot's
      // owner, so no sweep takes the base for one whose fork is gone.
      const claim = await claimOrAwait(this.opts.sandboxes, this.processToken, target, call.settings.backend, undefined, this.limitsOf(target));
      if (!claim.mine) throw new PolicyRefusedError(`session "${a.toSession}" got sandbox "${target.binding.sandboxKey}" meanwhile; fork to a new session`);
      let base: SnapshotRecord | undefined;
      let made: Sandbox | undefined;
      try {
        base = named === undefined ? await this.opts.gate.run(call, async (sc) => {
          await this.opts.gate.acquire(call, sc);
          return this.opts.taker.take(call, caps, { name: `@fork-${randomBytes(6).toString('hex')}`, kind: 'base', baseOf: target.spec.digest });
        }) : undefined;
        const from = (named ?? base) as SnapshotRecord;
        const sandbox = await this.holding(from, () => this.opts.lives.underLock(target.spec.digest, () =>
          this.opts.starts.run(() => caps.createFrom(target.spec, from.ref, undefined))));
        made = sandbox;
        const cwd = await carryShellState(this.opts.scopes, target, sandbox, from, call.defaultCwd);
        this.recordCreated(target, claim.record, sandbox);
        return { session: a.toSession, sandboxKey: target.binding.sandboxKey, from: named?.name ?? null, cwd };
      } catch (err) {
        if (made !== undefined) {
          const sandbox = made;
          await this.opts.backends.get(call.settings.backend).then((b) => b.remove(sandbox.ref, sandbox.hostDir)).catch(() => undefined);
        }
        this.opts.sandboxes.delete(target.spec.digest);
        if (base !== undefined) await this.removeSnapshot(base).catch(() => undefined);
        throw failed(`fork of sandbox "${call.binding.sandboxKey}" to session "${a.toSession}" failed`, err, untouched);
      }
    });
  }

  /** A sandbox for `call` made from snapshot `ref` where none is recorded: claimed, created, recorded, linked to the call's session. */
  private async createFromSnapshot(call: ResolvedCall, caps: SnapshotCapability, ref: string): Promise<Sandbox> {
    const claim = await claimOrAwait(this.opts.sandboxes, this.processToken, call, call.settings.backend, undefined, this.limitsOf(call));
    if (!claim.mine) throw busy(call, 'restored', 'another process created it meanwhile');
    try {
      const sandbox = await this.opts.starts.run(() => caps.createFrom(call.spec, ref, undefined));
      this.recordCreated(call, claim.record, sandbox);
      return sandbox;
    } catch (err) {
      this.opts.sandboxes.delete(call.spec.digest);
      throw err;
    }
  }

  /** The record of a sandbox made from a snapshot, and its session's link (an ephemeral one lives while its session does). */
  private recordCreated(call: ResolvedCall, claimed: Parameters<SandboxTable['put']>[0], sandbox: Sandbox): void {
    const now = Date.now();
    this.opts.sandboxes.put({ ...claimed, ref: sandbox.ref, name: sandbox.name, hostDir: sandbox.hostDir ?? null, lastUsedMs: now });
    this.opts.sessions.open(call.scope.tenant, call.scope.profile, call.sessionRef, call.spec.digest, this.opts.owner, now);
  }

  /**
   * Runs `fn` (a restore or fork from `snap`) holding the snapshot's lease, once the snapshot is
   * still there: a removal that ran while it waited, here or in another process, took it, and
   * nothing is made from a removed one.
   */
  private holding<T>(snap: SnapshotRecord, fn: () => Promise<T>): Promise<T> {
    return this.opts.lease(`snapshot:${snap.id}`, () => {
      if (this.opts.snapshots.byName(snap.tenant, snap.digest, snap.name)?.id !== snap.id) {
        throw new BerthError('not_found', `snapshot "${snap.name}" was removed meanwhile`);
      }
      return fn();
    });
  }

  /** Removes a snapshot from its backend, then its record; after any restore or fork from it under way, in any process. */
  removeSnapshot(snap: SnapshotRecord): Promise<void> {
    return this.opts.lease(`snapshot:${snap.id}`, async () => {
      if (snap.ref !== '') {
        const backend = await this.opts.backends.get(snap.backend);
        // Kept by its backend (a fork still uses it): no snapshot any more, but what it takes counts until freed.
        if (await backend.snapshots?.remove(snap.ref) === 'kept') {
          this.opts.snapshots.markGone(snap.tenant, snap.id);
          return;
        }
      }
      this.opts.snapshots.delete(snap.tenant, snap.id);
    });
  }

  private namedSnapshot(call: ResolvedCall, name: string): SnapshotRecord {
    const snap = this.opts.snapshots.byName(call.scope.tenant, call.spec.digest, name);
    if (snap === undefined || snap.kind !== 'named' || snap.ref === '') {
      throw new BerthError('not_found', `sandbox "${call.binding.sandboxKey}" has no snapshot "${name}"; list them with berth snapshot ls`);
    }
    return snap;
  }

  /** The call's backend's snapshots, or the refusal naming the backend and those of this config that keep them. */
  private async capabilityOf(call: ResolvedCall): Promise<SnapshotCapability> {
    const backend = await this.opts.backends.get(call.settings.backend);
    if (backend.snapshots !== undefined) return backend.snapshots;
    const used = [...new Set([this.opts.config.base.backend, ...Object.values(this.opts.config.profiles).map((p) => p.backend)])];
    const can: string[] = [];
    for (const name of used) {
      const b: Backend | undefined = await this.opts.backends.get(name).catch(() => undefined);
      if (b?.snapshots !== undefined) can.push(name);
    }
    throw new UnsupportedError(`backend "${call.settings.backend}" keeps no snapshots, so it cannot snapshot, restore or fork a sandbox; ` +
      (can.length > 0 ? `${can.join(', ')} of this config can: give profile "${call.scope.profile}" that backend`
        : 'docker and bwrap can: give the profile one of them'));
  }

  private limitsOf(call: ResolvedCall): { quota: TenantQuota; reserves: ReturnType<typeof reservationOf> } {
    return { quota: this.opts.quota, reserves: reservationOf(this.opts.config.backends.module(call.settings.backend), call.settings) };
  }

  /** Runs one snapshot action and writes its audit entry, whether it succeeded or failed. */
  private async audited<T>(call: ResolvedCall, action: string, fn: () => Promise<T>): Promise<T> {
    const startedMs = Date.now();
    let errorCode: string | undefined;
    try {
      return await fn();
    } catch (err) {
      errorCode = isBerthError(err) ? err.code : 'internal';
      throw err;
    } finally {
      this.opts.audit.record({ kind: 'snapshot', call, action, startedMs, errorCode });
    }
  }
}

/** A restore's or fork's failure, keeping its cause's code, saying that nothing changed. */
function failed(what: string, err: unknown, untouched: string): BerthError {
  const code = isBerthError(err) ? err.code : 'internal';
  const msg = err instanceof Error ? err.message : String(err);
  return new BerthError(code, `${what}: ${msg}; ${untouched}`, { cause: err });
}
