import { z } from 'zod';
import { HTTP_CODES } from './http-error.js';

/*
 * What the HTTP API answers, for the OpenAPI document (`openApiDocument`). Requests are checked
 * by the schemas in schemas.ts; these describe answers and check nothing at run time. No host
 * path appears in any of them (docs/design.md §8): a mount is a boolean, an export a route.
 */

export const ErrorAnswer = z.object({
  error: z.object({
    code: z.enum(HTTP_CODES).describe('stable and machine-readable; the status follows from it'),
    message: z.string().describe('what happened and what to do about it'),
  }),
}).meta({ id: 'Error' });

export const ExecResult = z.object({
  exitCode: z.number().int(),
  stdout: z.string(),
  stderr: z.string(),
  output: z.string().describe('stdout and stderr interleaved in arrival order'),
  cwd: z.string(),
  durationMs: z.number(),
  timedOut: z.boolean(),
  truncated: z.boolean(),
  sandboxKey: z.string(),
  shellReplaced: z.boolean().optional(),
  sandboxRecreated: z.boolean().optional(),
  sandboxResumed: z.object({
    hibernatedMs: z.number().int().describe('when the sandbox was hibernated (ms since the epoch)'),
    restored: z.array(z.string()).describe('what came back: files; cwd, exported variables, functions and aliases when the shell loaded its saved state'),
    lost: z.array(z.string()).describe('what did not: running processes, unexported variables, shell options, traps, tmpfs contents'),
  }).optional().describe('set on the first result after the sandbox was resumed from hibernation'),
}).meta({ id: 'ExecResult' });

export const Binding = z.object({
  backend: z.string(),
  isolation: z.enum(['container', 'namespace', 'remote', 'none'])
    .describe('container; namespace: Linux namespaces on the server\'s host (bwrap); remote: another host; none: commands run without isolation (see note)'),
  note: z.string().optional().describe('set when the backend does not isolate like a container, or an isolation was turned off: where commands run and how'),
  kill: z.enum(['cgroup', 'tags'])
    .describe('how a timeout, a caller gone away or a job\'s kill ends a command\'s processes: cgroup: the kernel\'s grouping, a cgroup per command that nothing the command does gets out of; tags: by the tags in their environment, their session and process group (a process that clears its environment and leaves its session is not found)'),
  tenant: z.string(),
  profile: z.string(),
  sandboxKey: z.string(),
  rule: z.string(),
  persistent: z.boolean(),
  mounted: z.boolean().describe('a host directory is mounted at /workspace (its path is for local callers only)'),
  mountReason: z.string(),
  cwd: z.string(),
  envNames: z.array(z.string()),
  envMissing: z.array(z.string()),
  egress: z.object({
    mode: z.enum(['open', 'allowlist', 'none']).describe('open: any host on the internet; allowlist: only what allow names, through berth\'s proxy; none: no network'),
    allow: z.array(z.union([z.string(), z.object({ host: z.string() }), z.object({ cidr: z.string(), ports: z.array(z.number().int()).optional() })])).optional()
      .describe('allowlist entries as the config writes them: a name, "*.name", {host: "name:port"}, {cidr: "a.b.c.d/n"} or {cidr, ports: [n]} (those ports only)'),
    deny: z.array(z.union([z.string(), z.object({ host: z.string() }), z.object({ cidr: z.string() })])).optional().describe('entries that beat allow'),
    hosts: z.record(z.string(), z.array(z.string())).optional().describe('static names the proxy resolves itself'),
    proxy: z.boolean().describe('berth\'s egress proxy serves the sandbox (allowlist mode, or credentials in any mode)'),
    credentials: z.array(z.object({ name: z.string(), hosts: z.array(z.string()) }))
      .describe('each credential the sandbox holds a placeholder for under `name`; the proxy puts the real value in only on requests to `hosts`'),
  }).describe('the egress policy of the sandbox; never a credential value or placeholder'),
  lifecycle: z.object({
    whenIdle: z.enum(['removed', 'hibernated', 'never'])
      .describe('removed: an ephemeral sandbox goes; hibernated: a persistent one is stopped with its files and shell state kept and resumed by the next call; never: kept running (hibernateSeconds 0)'),
    afterSeconds: z.number().int().describe('after this long without a call, command or running job (0 with never)'),
    hibernatedMs: z.number().int().optional().describe('set when the sandbox is hibernated now (ms since the epoch)'),
  }),
}).meta({ id: 'Binding' });

export const Sandbox = z.object({
  sandboxKey: z.string(),
  tenant: z.string(),
  profile: z.string().nullable(),
  backend: z.string(),
  rule: z.string(),
  persistent: z.boolean(),
  name: z.string(),
  mounted: z.boolean(),
  createdMs: z.number().int(),
  lastUsedMs: z.number().int(),
  hibernatedMs: z.number().int().optional().describe('when berth hibernated it (ms since the epoch); absent while it runs'),
  state: z.enum(['active', 'running', 'hibernated', 'stopped', 'missing', 'unknown'])
    .describe('active: open in this server; hibernated: stopped by berth with its files and shell state kept, resumed by the next call; stopped: stopped otherwise'),
  sessions: z.array(z.object({ session: z.string(), open: z.boolean() })),
}).meta({ id: 'Sandbox' });

export const Export = z.object({
  exportId: z.string().regex(/^[0-9a-f]{16}$/),
  download: z.string().describe('GET this route (with the same token) for the content: /v1/files/exports/{exportId} and the scope query'),
  bytes: z.number().int(),
  kind: z.enum(['file', 'dir']),
}).meta({ id: 'Export' });

export const AuditEntry = z.object({
  timeMs: z.number().int(),
  tenant: z.string(),
  profile: z.string(),
  user: z.string().nullable(),
  session: z.string().nullable(),
  sandboxKey: z.string().nullable(),
  kind: z.string(),
  command: z.string().nullable(),
  exitCode: z.number().int().nullable(),
  durationMs: z.number().int().nullable(),
  tokenId: z.string().nullable().describe('the bearer token the call came with (null: a local call, or an entry from before tokens were recorded)'),
  tokenName: z.string().nullable().describe("that token's name (berth token create --name), null when it has none"),
}).meta({ id: 'AuditEntry' });

export const EgressAuditEntry = z.object({
  timeMs: z.number().int(),
  tenant: z.string(),
  profile: z.string(),
  session: z.string().nullable(),
  user: z.string().nullable(),
  sandboxKey: z.string(),
  host: z.string().describe('the name or address the sandbox asked for'),
  port: z.number().int(),
  channel: z.enum(['tls-tunnel', 'tcp-tunnel', 'http', 'intercepted'])
    .describe('a TLS tunnel, a raw TCP tunnel, a plain HTTP request, or a request inside an intercepted (credential host) session'),
  allowed: z.boolean(),
  rule: z.string().describe('what decided: an egress entry (`allow api.github.com`, `deny cidr:10.0.0.0/8`), the mode, `not in egress.allow`, an always-denied class, `exfiltration`, `host mismatch`, `fronting`, `lookup failed`, `upstream failed`'),
  detail: z.string().nullable().describe('what the rule found (an address, the credential whose placeholder was seen); never a value'),
  bytesUp: z.number().int(),
  bytesDown: z.number().int(),
  credentials: z.array(z.string()).describe('names of the credentials whose values the request carried upstream'),
  status: z.number().int().nullable().describe('the HTTP status the sandbox got (HTTP requests and refusals)'),
}).meta({ id: 'EgressAuditEntry' });

const JobStatus = z.enum(['running', 'exited', 'killed', 'unknown']);

export const JobSummary = z.object({
  jobId: z.string(),
  command: z.string(),
  status: JobStatus,
  exitCode: z.number().int().nullable(),
  startedMs: z.number().int(),
}).meta({ id: 'JobSummary' });

export const JobRead = z.object({
  output: z.string(),
  nextOffset: z.number().int(),
  done: z.boolean().describe('the job ended and nothing is left past nextOffset'),
  exitCode: z.number().int().nullable(),
  status: JobStatus,
}).meta({ id: 'JobRead' });

export const JobStarted = z.object({ jobId: z.string(), sandboxKey: z.string() });
export const JobKilled = z.object({ killed: z.boolean() });
export const Closed = z.object({ removed: z.array(z.string()), kept: z.array(z.string()), wasOpen: z.boolean() });
export const Whoami = z.object({
  tenant: z.string(),
  profiles: z.array(z.string()),
  /** The token the call came with: its id and name, never its secret (the audit names it the same way). */
  token: z.object({ id: z.string(), name: z.string().optional() }).optional(),
});
export const Health = z.object({ ok: z.literal(true) });
export const Written = z.object({ path: z.string(), bytes: z.number().int() });
