/**
 * berth: the right sandbox for every agent conversation. This is the library core (the broker,
 * config, scope, errors and types); the HTTP server is `berth/server` and MCP is `berth/mcp`, so
 * importing the core loads neither.
 *
 * @example
 * ```ts
 * import { Broker, parseConfig } from 'berth';
 * await using broker = await Broker.open({ config: parseConfig({ backend: 'docker', persistent: false }) });
 * await using chat = broker.session({ tenant: 'acme', session: 'chat-42', user: 'telegram:123' });
 * const r = await chat.exec('echo hello > note.txt && ls');
 * ```
 */
export { Broker, SessionHandle } from './broker/broker.js';
export type { BrokerOptions, BrokerExecResult, CloseResult, ExecOptions, SandboxInfo } from './broker/broker.js';
export type { BrokerFiles } from './broker/file-calls.js';
export type { BrokerJobs } from './broker/job-calls.js';
export type { BrokerReapers } from './broker/reapers.js';
export type { SessionFiles, SessionJobs } from './broker/session-handle.js';
export type { SessionSnapshots } from './broker/session-snapshots.js';
export type { SnapshotCalls } from './broker/snapshot-calls.js';
export type { ForkResult, RestoreResult, SnapshotInfo } from './broker/snapshot-info.js';
export type { Binding, Isolation } from './broker/resolve-call.js';
export type { TaskOverride } from './broker/task-override.js';
export { parseConfig } from './setup/parse-config.js';
export { loadConfig, findConfig, defaultBerthHome } from './setup/load-config.js';
export type { BerthConfig, ProfileSettings } from './setup/berth-config.js';
export type { ScopeMode, EnvSettings } from './config/types.js';
export type { BackendName, DockerSettings } from './backends/registry.js';
export type { CallScope, CallScopeInput, AttachedWorkspace, CwdSource } from './scope/call-scope.js';
export { runWithScope, currentScope } from './scope/async-context.js';
export type { ExecResult } from './shell/types.js';
export type { Backend, Sandbox, SandboxSpec, ManagedSandbox } from './backends/backend.js';
export type { SandboxIdentity } from './scope/naming.js';
export type { ShellTransport } from './shell/transport.js';
export {
  BerthError, ConfigError, UsageError, PolicyRefusedError, BackendUnavailableError, UnsupportedError,
  SandboxNotFoundError, TimeoutError, isBerthError,
} from './errors.js';
export type { ErrorCode } from './errors.js';
export { FileTooLargeError, PathNotFoundError } from './files/errors.js';
export { normalizeSandboxPath, sandboxPathRefusal } from './files/sandbox-path.js';
export type { SandboxPathPolicy } from './files/sandbox-path.js';
export { parseSecretsFile } from './policy/secrets-file.js';
export type { SecretsFile } from './policy/secrets-file.js';
export type { AuditEntry } from './broker/state/audit-table.js';
export type { JobStatus } from './broker/job-ledger.js';
export type { JobReadResult } from './broker/job-reader.js';
export type { JobSummary } from './broker/job-runner.js';
