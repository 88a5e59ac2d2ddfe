import type { Broker } from '../../broker/broker.js';
import type { Binding } from '../../broker/resolve-call.js';
import { settingsFor } from '../../config/types.js';
import type { CallScopeInput } from '../../scope/call-scope.js';
import { normalizeScope } from '../../scope/normalize.js';

/**
 * What the tools tell the agent about the sandbox it gets: where commands really run and what
 * survives. Written from the binding and the backend module's own words, so a description never
 * promises what the backend does not do.
 */
export interface SandboxDescription {
  binding: Binding;
  /** The berth session this MCP session is. */
  session: string;
  /** Default per-command timeout from the config, in seconds. */
  defaultTimeoutSeconds: number;
  /** One paragraph for tool descriptions: isolation and persistence. */
  summary: string;
  /** Server instructions: the summary plus the sandbox key rule. */
  instructions: string;
}

/**
 * Describes the sandbox a scope resolves to (pure policy: `explain`, no engine contacted). With
 * `remote` (MCP over HTTP) it names no host path.
 *
 * @example
 * describeSandbox(broker, { tenant: 'acme', session: 'mcp-1' }).summary
 * // 'Commands run in a Docker container created for this session, isolated from the host. ...'
 * @throws the berth error `explain` throws (a refused scope, an invalid config).
 */
export function describeSandbox(broker: Broker, scope: CallScopeInput, opts: { remote?: boolean } = {}): SandboxDescription {
  const binding = broker.explain(scope);
  const remote = opts.remote === true;
  const s = normalizeScope(scope);
  const session = s.session ?? '(none)';
  const settings = settingsFor(broker.config, binding.profile);
  const module = broker.config.backends.module(binding.backend);
  const summary = [
    module.words.where({ persistent: binding.persistent, sandboxKey: binding.sandboxKey, cwd: binding.cwd }),
    module.words.persistence({ persistent: binding.persistent, cwd: binding.cwd, mounted: binding.mount !== null }),
    mountNote(binding, module.traits.mountsHostDirs, remote),
    egressNote(binding.egress),
  ].filter(Boolean).join(' ');
  const instructions = [
    `berth runs your shell commands in sandbox "${binding.sandboxKey}" (tenant "${binding.tenant}", profile "${binding.profile}", backend ${binding.backend}, isolation ${binding.isolation}).`,
    summary,
    'Every tool call of this MCP session goes to that sandbox and to one persistent shell: the working directory, exported variables, functions and aliases carry over from one terminal call to the next.',
    `Sandbox key rule: berth picks the sandbox from the call's tenant, profile, session, task and user according to its config (rule ${binding.rule} here). ` +
      'Calls with the same key in the same tenant and profile share files; calls with different keys never see each other\'s files, and tenants never share anything.',
    binding.sandboxKey === 'default' || binding.sandboxKey.startsWith('profile:') || binding.sandboxKey.startsWith('shared:')
      ? 'This key is shared: other sessions that resolve to it use the same sandbox and can see its files.'
      : `This key belongs to this session (berth session "${session}"); no other session reaches it.`,
    `Commands time out after ${settings.exec.timeoutSeconds} s unless you pass timeout; a timed-out command's process tree is killed and the shell stays usable. ` +
      'Use terminal with background: true for servers and long jobs, then the process tool to read their output or kill them.',
    'Closing this MCP session closes the berth session.',
  ].join('\n');
  return { binding, session, defaultTimeoutSeconds: settings.exec.timeoutSeconds, summary, instructions };
}

/** A remote caller is not told the host path of the mount (docs/design.md §8). */
function mountNote(b: Binding, mountsHostDirs: boolean, remote: boolean): string {
  if (b.mount === null || !mountsHostDirs) return '';
  const dir = remote ? 'A host directory' : `The host directory ${b.mount}`;
  return `${dir} is mounted at /workspace: files there are the host's files and outlive the sandbox.`;
}

/**
 * What the sandbox's network may reach and which variables hold credential placeholders, as
 * `explain` shows it (never a value or a placeholder): so an agent whose request is refused knows
 * why, and does not try to work around what the operator decided.
 */
export function egressNote(egress: Binding['egress']): string {
  const credentials = egress.credentials.length === 0 ? '' : ` Credentials: ${egress.credentials.map((c) => `$${c.name} holds a placeholder, not the secret; berth swaps in the real value only on requests to ${c.hosts.join(', ')}, and refuses it sent anywhere else.`).join(' ')} Use them as you would the real ones.`;
  switch (egress.mode) {
    case 'none':
      return 'Network: none; commands cannot connect anywhere.';
    case 'allowlist': {
      const allowed = (egress.allow ?? []).map(entryText).join(', ');
      return `Network: only through berth's egress proxy (HTTP(S)_PROXY is set; programs that ignore it cannot connect), to ${allowed === '' ? 'nothing' : allowed}` +
        ' (names: HTTPS on 443, plain HTTP on 80). Anything else gets HTTP 403 from the proxy naming the rule; the operator decides what the sandbox may reach, so do not try to get around it.' + credentials;
    }
    default:
      return egress.proxy ? `Network: open, through berth's egress proxy (HTTP(S)_PROXY is set).${credentials}` : '';
  }
}

/** An allow entry as `explain` gives it (`api.github.com`, `{ host }`, `{ cidr, ports? }`), in one phrase. */
function entryText(e: unknown): string {
  if (typeof e === 'string') return e;
  const { host, cidr, ports } = e as { host?: string; cidr?: string; ports?: number[] };
  if (host !== undefined) return `host:${host}`;
  return ports === undefined ? `cidr:${cidr}` : `cidr:${cidr} (ports ${ports.join(', ')})`;
}
