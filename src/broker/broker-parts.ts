import { homedir } from 'node:os';
import { hostGroupsUnusable } from '../backends/cgroups/cgroup-host.js';
import { unsetCredentialSources } from '../policy/credential-grants.js';
import type { SecretValues } from '../policy/env-grants.js';
import { readSecretsFiles } from '../policy/secrets-file.js';
import { ConfigError } from '../errors.js';
import type { BerthConfig } from '../setup/berth-config.js';
import { StagingLedger } from '../files/staging-quota.js';
import { Logger } from '../logging/logger.js';
import { envLogSink } from '../logging/log-sink.js';
import { assertAllowedRootsExist } from '../policy/allowed-roots.js';
import { assertHostBindsAllowed } from '../policy/volumes.js';
import { hostBindsOf } from '../setup/host-binds.js';
import { AuditRecorder } from './audit.js';
import { BackendRegistry } from './backend-registry.js';
import { BrokerLifecycle, type ClosingParts } from './broker-lifecycle.js';
import { EgressKeeper } from './egress-keeper.js';
import type { BrokerOptions } from './broker-types.js';
import { BrokerViews } from './broker-views.js';
import { CallResolver } from './call-resolver.js';
import { CommandRunner } from './command-runner.js';
import { Engines } from './engines.js';
import { BrokerFiles } from './file-calls.js';
import { BrokerJobs } from './job-calls.js';
import { JobKiller } from './job-killer.js';
import { JobLedger } from './job-ledger.js';
import { JobProbe } from './job-probe.js';
import { JobReader } from './job-reader.js';
import { JobRunner } from './job-runner.js';
import { LiveCap } from './live-cap.js';
import { LiveSandboxes } from './live-sandboxes.js';
import { Observers } from './observer.js';
import { ownerToken } from '../kit/process-owner.js';
import { Reapers } from './reapers.js';
import { SandboxEgress } from './sandbox-egress.js';
import { usesEgressProxy } from './resolve-call.js';
import { SandboxMeasures } from './sandbox-measures.js';
import { SandboxPool } from './sandbox-pool.js';
import { SandboxRecovery } from './sandbox-recovery.js';
import { SandboxHolders } from './sandbox-holders.js';
import { SandboxRemoval } from './sandbox-removal.js';
import { ScopeCalls } from './scope-calls.js';
import { SessionCalls } from './session-calls.js';
import { SessionCloser } from './session-close.js';
import { SessionGate } from './session-gate.js';
import { SessionLinks } from './session-links.js';
import { ShellPool } from './shell-pool.js';
import { spillDirOf } from './spill.js';
import { StartGate } from './start-gate.js';
import { StateStore } from './state/state-store.js';
import { storeLease } from './store-lease.js';
import { SnapshotCalls } from './snapshot-calls.js';
import { SnapshotSweep } from './snapshot-sweep.js';
import { SnapshotTaker } from './snapshot-taker.js';
import { snapshotQuota, tenantQuota } from './tenant-quota.js';
import { WarmPool } from './warm-pool.js';

const DOCKER_SOCKETS = ['/var/run/docker.sock', '/run/docker.sock'];

/** The parts of one broker; each method of the broker is one of theirs. */
export interface BrokerParts {
  store: StateStore;
  lifecycle: BrokerLifecycle;
  calls: ScopeCalls;
  views: BrokerViews;
  measures: SandboxMeasures;
  pool: SandboxPool;
  warm: WarmPool;
  reapers: Reapers;
  audit: AuditRecorder;
  observers: Observers;
  files: BrokerFiles;
  jobs: BrokerJobs;
  egress: SandboxEgress;
  snapshots: SnapshotCalls;
  snapshotSweep: SnapshotSweep;
  engines: Engines;
  /** Holds sandboxes another process left with a background job, while one runs (`berth __keep`). */
  keeper: EgressKeeper;
  /** What the close takes down, in its order. */
  closing: ClosingParts;
}

/**
 * Builds a broker's parts from its config (checked against this host first) and opens its state:
 * each part is given the parts it asks for, no more. Contacts no engine.
 */
export function buildParts(config: BerthConfig, berthHome: string, opts: BrokerOptions): BrokerParts {
  const env = opts.env ?? process.env;
  const secrets = readSecretsFiles(config);
  const homeDir = homedir();
  const dockerSockets = dockerSocketsOf(env);
  assertHostBindsAllowed(hostBindsOf(config), { homeDir, stateDir: berthHome, dockerSockets });
  assertAllowedRootsExist(config);
  assertCredentialSources(config, env, secrets);
  assertEgressEngineHere(config, env);
  const log = opts.log ?? envLogSink(env, 'warn', process.stderr.isTTY, (line) => void process.stderr.write(line)) ?? (() => {});
  const logger = new Logger(log);
  const store = StateStore.open(berthHome, {
    auditMaxCommandChars: config.audit.maxCommandChars,
    onWriteFailure: (line) => logger.child('berth:state').error(line),
  });
  const lifecycle = new BrokerLifecycle();
  const owner = opts.holdSessions === false ? null : ownerToken();
  // What explain says of the kill (the backends check each sandbox again as they start it).
  const grouping = { host: hostGroupsUnusable() === undefined, engineOnHost: engineOnThisHost(env) };
  const resolver = new CallResolver(
    { config, store, berthHome, homeDir, dockerSockets, hostEnv: Object.freeze({ ...env }), secrets, grouping },
    env['BERTH_SESSION'] || undefined,
  );
  const observers = new Observers();
  const audit = new AuditRecorder(store.audit, {
    retentionDays: config.audit.retentionDays, log: (m) => logger.child('berth:audit').warn(m), observer: observers, egress: store.egress,
  });
  const gate = opts.startGate ?? StartGate.forThisMachine();
  const quota = tenantQuota(config.limits, berthHome);
  // One lease over the store for every process of this installation: engine objects and snapshots.
  const lease = storeLease(store.leases);
  const backends = new BackendRegistry({
    catalog: config.backends, berthHome, installation: store.installationId, injected: opts.backends,
    log: logger, lease, profiles: [config.base, ...Object.values(config.profiles)],
  });
  const warm = new WarmPool({ config, backends, gate, fill: opts.warmPool === true, observer: observers, log: logger.child('berth:pool') });
  const processToken = ownerToken();
  const lives = new LiveSandboxes((digest) => store.sandboxes.release(digest, processToken));
  const engines = new Engines({ config, backends, sandboxes: store.sandboxes });
  const links = new SessionLinks({ sessions: store.sessions, sandboxes: store.sandboxes, config, owner });

  const ledger = new JobLedger({ jobs: store.jobs, resolver });
  const probe = new JobProbe({ jobs: store.jobs, ledger });
  const killer = new JobKiller({ jobs: store.jobs, ledger, probe, log: logger.child('berth:jobs') });
  const egress = new SandboxEgress({
    config, berthHome, resolver, listeners: store.egressListeners, onDecision: (e) => {
      observers.egress(e);
      audit.recordEgress(e);
    },
    log: logger.child('berth:egress'),
  });
  const holders = new SandboxHolders({ sandboxes: store.sandboxes, sessions: store.sessions });
  const removal = new SandboxRemoval({ lives, backends, sandboxes: store.sandboxes, holders, jobs: killer, egress, log: logger });
  const measures = new SandboxMeasures({ config, lives, backends, engines, sandboxes: store.sandboxes, jobs: store.jobs, gate, shutdown: lifecycle.signal, log: logger });
  const sessionCalls = new SessionCalls();
  const closer = new SessionCloser({
    calls: sessionCalls, lives, removal, links, sessions: store.sessions, sandboxes: store.sandboxes, scopes: store.scopes, audit, berthHome, owner, log: logger,
  });
  const reapers = new Reapers({
    config, sandboxes: store.sandboxes, sessions: store.sessions, lives, engines, removal, closer, links, measures, warm, jobs: probe, runningJobs: store.jobs, audit,
    observer: observers, reap: opts.reap ?? true, shutdown: lifecycle.signal, log: logger,
  });
  const cap = new LiveCap({
    max: config.limits.liveSandboxes, lives, jobs: probe, gate, log: logger,
    hibernate: (live, stillIdle) => removal.hibernate(live, stillIdle),
    hibernated: (live) => observers.reaped({ reason: 'hibernated', tenant: live.record.tenant, backend: live.record.backend }),
  });
  const pool = new SandboxPool({
    config, lives, backends, sandboxes: store.sandboxes, links, firstUse: reapers, removal, warm, warmPool: opts.warmPool === true, quota, gate, cap, egress, log: logger,
  });
  const sessionGate = new SessionGate({ calls: sessionCalls, pool });
  const shells = new ShellPool({ scopes: store.scopes, longLived: owner !== null, spillDir: (opts.spillOutput ?? true) ? spillDirOf(berthHome) : undefined, gate });
  const commands = new CommandRunner({ gate: sessionGate, lives, shells, recovery: new SandboxRecovery({ lives, log: logger }), shutdown: lifecycle.signal, log: logger });
  const reader = new JobReader({ ledger, probe, sandboxes: pool, resolver });
  const runner = new JobRunner({ jobs: store.jobs, ledger, reader, killer, sandboxes: pool, commands, audit });
  const taker = new SnapshotTaker({
    lives, snapshots: store.snapshots, snapshotQuota: snapshotQuota(config.limits, berthHome), scopes: store.scopes, jobs: probe, holders,
  });
  const snapshots = new SnapshotCalls({
    config, resolver, gate: sessionGate, lives, backends, sandboxes: store.sandboxes, sessions: store.sessions, snapshots: store.snapshots,
    scopes: store.scopes, taker, egress, audit, starts: gate, quota, owner, lifecycle, lease,
  });
  const snapshotSweep = new SnapshotSweep({
    snapshots: store.snapshots, sandboxes: store.sandboxes, calls: snapshots, backends, log: logger,
    backendNames: [...new Set([config.base.backend, ...Object.values(config.profiles).map((p) => p.backend)])],
    retentionDays: config.limits.snapshotRetentionDays,
  });
  return {
    store, lifecycle, measures, pool, warm, reapers, audit, observers, egress, snapshots, snapshotSweep, engines,
    calls: new ScopeCalls({ resolver, commands, audit, closer, removal, sandboxes: store.sandboxes, scopes: store.scopes, lifecycle }),
    views: new BrokerViews({ sandboxes: store.sandboxes, sessions: store.sessions, audit: store.audit, jobs: store.jobs, links, measures, quota }),
    files: new BrokerFiles({
      resolver, gate: sessionGate, lives, audit, lifecycle, berthHome, stagingBytes: config.limits.stagingBytes, stagingLedger: new StagingLedger(berthHome), log: logger,
    }),
    jobs: new BrokerJobs({ resolver, runner, reader, lifecycle }),
    keeper: new EgressKeeper({ resolver, sandboxes: store.sandboxes, holders, backends, gate: sessionGate, lives, egress, shutdown: lifecycle.signal, log: logger }),
    closing: { reapers, lives, closer, warm, removal, backends, egress, store, keeper: opts.keeper, log: logger },
  };
}

/** Every credential's source is set somewhere berth reads (a `from` nowhere is a start-up error, not a failed request later). */
function assertCredentialSources(config: BerthConfig, env: NodeJS.ProcessEnv, secrets: ReadonlyMap<string, SecretValues>): void {
  const places = placesOf(config);
  const problems = [...new Set(places.flatMap((p) => unsetCredentialSources(p, env, secrets)))];
  if (problems.length > 0) throw new ConfigError(problems.join('; '));
}

/** The config's top level (profile undefined) and each profile, with its merged settings. */
function placesOf(config: BerthConfig) {
  return [{ profile: undefined, ...config.base }, ...Object.entries(config.profiles).map(([profile, s]) => ({ ...s, profile }))];
}

/**
 * The egress proxy listens inside each sandbox's network namespace on this host: a docker engine
 * that DOCKER_HOST names on another machine (TCP or SSH to a host that is not loopback) has its
 * containers' namespaces there, so a place on it that uses the proxy could never serve a call.
 * Said at start-up rather than at the first call. (TCP to loopback is let through: that engine may
 * be this host's, which the first call checks.)
 */
function assertEgressEngineHere(config: BerthConfig, env: NodeJS.ProcessEnv): void {
  const dockerHost = env['DOCKER_HOST'] ?? '';
  if (dockerHost === '' || dockerHost.startsWith('unix://') || loopbackEngine(dockerHost)) return;
  const places = placesOf(config);
  const bad = places.filter((p) => p.backend === 'docker' && usesEgressProxy(p));
  if (bad.length === 0) return;
  const where = bad.map((p) => (p.profile === undefined ? 'the top level' : `profile "${p.profile}"`)).join(', ');
  throw new ConfigError(
    `${where} use${bad.length === 1 ? 's' : ''} berth's egress proxy (egress mode allowlist or credentials) on backend docker, but DOCKER_HOST=${dockerHost} ` +
      "names an engine on another machine: the proxy listens inside each container's network namespace on the host berth runs on; " +
      'run berth on the engine\'s host (unset DOCKER_HOST there), or use egress mode open without credentials for these places',
  );
}

/** `tcp://127.0.0.1:2375`, `http://localhost:2375`, `tcp://[::1]:2375`: an engine reached over loopback. */
function loopbackEngine(dockerHost: string): boolean {
  try {
    // A tcp: URL's host is not normalised as an http: one's is: LOCALHOST, 127.1.
    const host = new URL(dockerHost).hostname.replace(/^\[|\]$/g, '').toLowerCase();
    return host === 'localhost' || host === '::1' || /^127(\.\d+){0,3}$/.test(host);
  } catch {
    return false;
  }
}

/** The docker engine berth talks to is this machine's (a unix socket), not one over TCP or SSH. */
function engineOnThisHost(env: NodeJS.ProcessEnv): boolean {
  const dockerHost = env['DOCKER_HOST'];
  return dockerHost === undefined || dockerHost === '' || dockerHost.startsWith('unix://');
}

function dockerSocketsOf(env: NodeJS.ProcessEnv): string[] {
  const dockerHost = env['DOCKER_HOST'];
  return dockerHost?.startsWith('unix://') ? [...DOCKER_SOCKETS, dockerHost.slice('unix://'.length)] : DOCKER_SOCKETS;
}
