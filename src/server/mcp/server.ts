import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import {
  CallToolRequestSchema, ErrorCode, McpError, type CallToolResult, type ServerNotification, type ToolAnnotations,
} from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod';
import type { Broker } from '../../broker/broker.js';
import { isBerthError } from '../../errors.js';
import type { CallScopeInput } from '../../scope/call-scope.js';
import { normalizeScope } from '../../scope/normalize.js';
import { downloadRoute, exportIdOf } from '../export-download.js';
import { isRefusal } from '../http-error.js';
import { assertImageFits, imageMimeOf, MAX_IMAGE_BYTES } from './image-content.js';
import { progressStream } from './progress.js';
import { addSnapshotTools } from './snapshot-tools.js';
import type { SandboxDescription } from './sandbox-description.js';
import { bugResult, decodeBytes, execResult, refusal, text } from './tool-results.js';
import { ExportFileArgs, ProcessArgs, ReadFileArgs, TerminalArgs, WriteFileArgs } from './tool-schemas.js';
import { BERTH_VERSION } from '../../kit/version.js';
import { Logger, type LogSink } from '../../logging/logger.js';

export interface McpServerInfo {
  /** What the scope resolves to (`describeSandbox`): tool descriptions and instructions come from it. */
  sandbox: SandboxDescription;
  /** Reported to the client as the server version. */
  version?: string;
  /**
   * The client is remote (MCP over HTTP): `export_file` answers the export's download route
   * (`GET /v1/files/exports/<id>` on `berth serve`, same bearer token) instead of its host path.
   */
  remote?: boolean;
  /** Told of every call berth refused (policy, credentials, a limit), by error code: the server's metrics. */
  onRefused?: (code: string) => void;
  /** Where a bug in berth met while a tool ran is logged, with its stack (the agent is told only that it is one). */
  /** Where a tool's bug is logged (at error, with its stack). */
  log?: LogSink | undefined;
}

/** What a tool run gets besides its arguments: the request's progress token and a way to notify for it. */
interface ToolContext {
  progressToken: string | number | undefined;
  sendNotification: (n: ServerNotification) => Promise<void>;
}

interface ToolDef {
  schema: z.ZodType<Record<string, unknown>>;
  run: (args: never, ctx: ToolContext) => Promise<CallToolResult>;
}

/** The resource listing the session's background jobs. */
const JOBS_RESOURCE = 'berth://session/jobs';
/** The resource listing the egress proxy's decisions for the session's sandbox. */
const EGRESS_RESOURCE = 'berth://session/egress';

/**
 * An MCP server whose tools run in one berth session: `terminal`, `process`, `read_file`,
 * `write_file`, `export_file`, `snapshot_create`, `snapshot_list`, `snapshot_restore`; and two resources, the session's background jobs (`JOBS_RESOURCE`) and its sandbox's egress decisions (`EGRESS_RESOURCE`). Connect it to one transport; closing the berth session when the
 * connection ends is the caller's job (see `serveMcpStdio`, `createMcpHttpHandler`).
 *
 * Bad arguments (wrong type, unknown field, missing field) are JSON-RPC errors (-32602): a tool's
 * arguments are checked by its schema before it runs. Whatever a tool throws after that is a
 * result with `isError: true` the agent can read, for every error category alike (refused, not
 * found, over a bound, a backend down, the session closed, an argument only the call itself could
 * judge such as an offset past a job's output); a bug in berth says it is one, and its stack goes
 * to `info.log`.
 *
 * @example
 * ```ts
 * const scope = { tenant: 'acme', session: 'mcp-1' };
 * const server = createMcpServer(broker, scope, { sandbox: describeSandbox(broker, scope) });
 * await server.connect(new StdioServerTransport());
 * ```
 */
export function createMcpServer(broker: Broker, scope: CallScopeInput, info: McpServerInfo): McpServer {
  const { sandbox } = info;
  const mcp = new McpServer(
    { name: 'berth', version: info.version ?? BERTH_VERSION },
    { instructions: sandbox.instructions, capabilities: { tools: {} } },
  );
  const tools = new Map<string, ToolDef>();
  const add = <S extends z.ZodType<Record<string, unknown>>>(
    name: string,
    config: { title: string; description: string; annotations: ToolAnnotations },
    schema: S,
    run: (args: z.output<S>, ctx: ToolContext) => Promise<CallToolResult>,
  ): void => {
    tools.set(name, { schema, run: run as ToolDef['run'] });
    // Registered for tools/list (JSON Schema from the zod schema); calls go through the tools/call handler set below.
    mcp.registerTool(name, { ...config, inputSchema: schema as unknown as z.ZodObject },
      (args: unknown, extra) => run(args as z.output<S>, { progressToken: extra._meta?.progressToken, sendNotification: extra.sendNotification }));
  };

  add('terminal', {
    title: 'Run a shell command',
    description: `Runs one shell line in this session's sandbox through a persistent bash: cwd, exported variables and functions carry over between calls. ${sandbox.summary} ` +
      `Returns the exit code, cwd, stdout and stderr; a non-zero exit or a timeout (default ${sandbox.defaultTimeoutSeconds} s) is an error result. ` +
      'With background: true the command runs as a job and its jobId comes back at once. ' +
      'A request with a progressToken gets the output as progress notifications while the command runs.',
    annotations: { destructiveHint: true, openWorldHint: true },
  }, TerminalArgs, async (a, ctx) => {
    if (a.background === true) {
      const job = await broker.jobs.start(scope, a.command, a.workdir === undefined ? {} : { workdir: a.workdir });
      return text(
        `started background job ${job.jobId} in sandbox "${job.sandboxKey}"\n` +
        `read its output with process {"action": "read", "jobId": "${job.jobId}"}; stop it with {"action": "kill", ...}`,
        { jobId: job.jobId, sandboxKey: job.sandboxKey },
      );
    }
    const timeoutSeconds = a.timeout ?? sandbox.defaultTimeoutSeconds;
    const progress = ctx.progressToken === undefined ? undefined : progressStream(ctx.progressToken, ctx.sendNotification);
    try {
      const r = await broker.exec(scope, a.command, { timeoutSeconds, workdir: a.workdir, ...(progress === undefined ? {} : { onChunk: progress.onChunk }) });
      return execResult(r, timeoutSeconds);
    } finally {
      await progress?.flush();
    }
  });

  add('process', {
    title: 'Background jobs',
    description: 'Manages the background jobs this session started with terminal {background: true}: ' +
      'list them, read a job\'s output from a byte offset (the answer says whether it is still running and its exit code when done), ' +
      'or kill a job\'s process tree (other jobs and the shell are not touched).',
    annotations: { destructiveHint: true },
  }, ProcessArgs, async (a) => {
    if (a.action === 'list') {
      const list = await broker.jobs.list(scope);
      const lines = list.map((j) => `${j.jobId}  ${j.status}${j.exitCode === null ? '' : ` (exit ${j.exitCode})`}  started ${new Date(j.startedMs).toISOString()}  ${j.command}`);
      return text(lines.length === 0 ? 'no background jobs in this session' : lines.join('\n'), { jobs: list });
    }
    const jobId = a.jobId as string; // the schema requires it for read and kill
    if (a.action === 'kill') {
      const r = await broker.jobs.kill(scope, jobId);
      return text(r.killed ? `job ${jobId} killed` : `job ${jobId} was not running; nothing to kill`, { jobId, killed: r.killed });
    }
    const offset = a.offset ?? 0;
    const r = await broker.jobs.read(scope, jobId, { offset, ...(a.maxBytes === undefined ? {} : { maxBytes: a.maxBytes }) });
    const state = r.status === 'running' ? 'running'
      : r.status === 'exited' ? `exited with code ${r.exitCode ?? '?'}`
        : r.status === 'killed' ? 'killed'
          : 'completion unknown: the sandbox or its job record vanished, so no exit code is known';
    const body = `job ${jobId}: ${state}\noutput bytes ${offset}..${r.nextOffset}` +
      (r.done ? '' : ` (more may follow: read again with offset ${r.nextOffset})`) + `\n${r.output === '' ? '(no new output)' : r.output}`;
    return text(body, { jobId, status: r.status, done: r.done, exitCode: r.exitCode, nextOffset: r.nextOffset });
  });

  add('read_file', {
    title: 'Read a file',
    description: `Reads a whole file from this session's sandbox (files over the configured size limit are refused). Text comes back as is; ` +
      `a PNG, JPEG, GIF or WebP image (up to ${MAX_IMAGE_BYTES / 1024 / 1024} MiB) comes back as an image you can look at; ` +
      `any other file that is not valid UTF-8 comes back base64-encoded. ${sandbox.summary}`,
    annotations: { readOnlyHint: true },
  }, ReadFileArgs, async (a) => {
    const r = await broker.files.readFile(scope, { path: a.path, ...(a.maxBytes === undefined ? {} : { maxBytes: a.maxBytes }) });
    const mimeType = imageMimeOf(r.data);
    if (mimeType !== undefined) {
      assertImageFits(r.path, mimeType, r.data.length);
      return {
        content: [{ type: 'image', data: r.data.toString('base64'), mimeType }, { type: 'text', text: `(image ${r.path}, ${mimeType}, ${r.data.length} bytes)` }],
        structuredContent: { path: r.path, bytes: r.data.length, encoding: 'image', mimeType },
      };
    }
    const d = decodeBytes(r.data);
    const body = d.encoding === 'utf8' ? d.content : `(binary file ${r.path}, ${r.data.length} bytes, base64)\n${d.content}`;
    return text(body, { path: r.path, bytes: r.data.length, encoding: d.encoding });
  });

  add('write_file', {
    title: 'Write a file',
    description: `Creates or replaces a file in this session's sandbox from text or base64 content. ${sandbox.summary}`,
    annotations: { destructiveHint: true },
  }, WriteFileArgs, async (a) => {
    const data = a.encoding === 'base64' ? Buffer.from(a.content, 'base64') : Buffer.from(a.content, 'utf8');
    const r = await broker.files.upload(scope, { path: a.path, data, ...(a.mode === undefined ? {} : { mode: a.mode }) });
    return text(`wrote ${r.bytes} bytes to ${r.path}`, { path: r.path, bytes: r.bytes });
  });

  add('export_file', info.remote === true ? {
    title: 'Export a file for download',
    description: 'Copies a file or directory out of this session\'s sandbox into the session\'s private staging area on the berth server ' +
      'and returns a download route (GET it on the berth server with the same bearer token: a file comes back as its bytes, a directory as a tar), ' +
      'for the gateway to deliver (e.g. as an attachment). The copy is removed when the session closes.',
    annotations: { readOnlyHint: true },
  } : {
    title: 'Export a file to the host',
    description: 'Copies a file or directory out of this session\'s sandbox into the session\'s private staging directory on the berth host ' +
      'and returns that host path, for the operator or gateway to deliver (e.g. as an attachment). The copy is removed when the session closes.',
    annotations: { readOnlyHint: true },
  }, ExportFileArgs, async (a) => {
    const r = await broker.files.exportPath(scope, { path: a.path, ...(a.maxBytes === undefined ? {} : { maxBytes: a.maxBytes }) });
    if (info.remote === true) {
      // A remote client gets a route on the berth server, never a path on its host.
      const exportId = exportIdOf(r.hostPath);
      const download = downloadRoute(exportId, normalizeScope(scope));
      return text(`exported ${r.kind} ${a.path} (${r.bytes} bytes); download it from ${download}`, { exportId, download, bytes: r.bytes, kind: r.kind });
    }
    return text(`exported ${r.kind} ${a.path} (${r.bytes} bytes) to host path ${r.hostPath}`, { hostPath: r.hostPath, bytes: r.bytes, kind: r.kind });
  });

  addSnapshotTools(add, broker, scope);

  // What the egress proxy decided for this sandbox, for an agent whose request was refused.
  mcp.registerResource('egress', EGRESS_RESOURCE, {
    title: 'Network decisions for this sandbox',
    description: 'The egress proxy\'s most recent decisions for this session\'s sandbox (at most 50, newest first), as JSON: ' +
      'host, port, allowed, the rule that decided, bytes, and the names of credentials a request carried (never a value). Empty when the proxy does not serve the sandbox.',
    mimeType: 'application/json',
  }, async (uri) => {
    const b = sandbox.binding;
    // A sandbox shared by several users (scope shared or profile) shows each user only their own decisions.
    const user = normalizeScope(scope).user;
    const decisions = broker.egressAudit({ tenant: b.tenant, profiles: [b.profile], sandboxKey: b.sandboxKey, ...(user === undefined ? {} : { user }), limit: 50 });
    return { contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(decisions) }] };
  });

  // The same list as process {action: "list"}, for clients that show resources rather than call tools.
  mcp.registerResource('jobs', JOBS_RESOURCE, {
    title: 'Background jobs of this session',
    description: 'This session\'s background jobs (terminal with background: true), oldest first, as JSON: jobId, command, status, exitCode, startedMs.',
    mimeType: 'application/json',
  }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(await broker.jobs.list(scope)) }],
  }));

  // The SDK's own tools/call handler (1.32) turns argument validation errors into isError results
  // (SEP-1303). berth's contract is that bad arguments are protocol errors and only what happened
  // while running the call is a result, so calls are dispatched here with the same schemas.
  mcp.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name } = request.params;
    const tool = tools.get(name);
    if (tool === undefined) {
      throw new McpError(ErrorCode.InvalidParams, `unknown tool "${name}"; berth offers ${[...tools.keys()].join(', ')}`);
    }
    const parsed = tool.schema.safeParse(request.params.arguments ?? {});
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.length === 0 ? 'arguments' : i.path.join('.')}: ${i.message}`);
      throw new McpError(ErrorCode.InvalidParams, `invalid arguments for ${name}: ${issues.join('; ')}`);
    }
    try {
      return await tool.run(parsed.data as never, { progressToken: request.params._meta?.progressToken, sendNotification: extra.sendNotification });
    } catch (err) {
      if (isBerthError(err) && err.code !== 'internal') {
        if (isRefusal(err.code)) info.onRefused?.(err.code);
        return refusal(err);
      }
      new Logger(info.log).child('berth:mcp').error(`${name}: ${String(err)}`, { stack: err instanceof Error ? err.stack : undefined });
      return bugResult(name);
    }
  });
  return mcp;
}
