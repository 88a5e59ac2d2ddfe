import * as z from 'zod';

/*
 * Input schemas of the MCP tools. Strict objects: an unknown argument is a protocol error (JSON-RPC
 * -32602), like a wrong type or a missing field, never a tool result. The same schemas produce the
 * JSON Schema that tools/list shows.
 */

/** Longest command line accepted (characters). */
const MAX_COMMAND_CHARS = 1_000_000;
/** Largest write_file content accepted (characters of text or base64). */
const MAX_CONTENT_CHARS = 64 * 1024 * 1024;
/** Largest read the tools ask for at once (bytes). */
const MAX_READ_BYTES = 16 * 1024 * 1024;
const MAX_PATH_CHARS = 4096;
const MAX_TIMEOUT_SECONDS = 86_400;

const path = z.string().min(1).max(MAX_PATH_CHARS);
const maxBytes = z.number().int().min(1).max(MAX_READ_BYTES);

export const TerminalArgs = z.strictObject({
  command: z.string().min(1).max(MAX_COMMAND_CHARS)
    .describe('One shell line (bash), run in the sandbox\'s persistent shell, e.g. "cd src && ls -la".'),
  timeout: z.number().positive().max(MAX_TIMEOUT_SECONDS).optional()
    .describe('Seconds before the command\'s process tree is killed (exit code 124). Foreground commands only.'),
  workdir: path.optional()
    .describe('Run this one command in this directory (a sandbox path); the shell\'s own cwd does not change.'),
  background: z.boolean().optional()
    .describe('Start the command as a background job and return its jobId at once; read or kill it with the process tool.'),
}).superRefine((a, ctx) => {
  if (a.background === true && a.timeout !== undefined) {
    ctx.addIssue({
      code: 'custom', path: ['timeout'],
      message: 'timeout applies to foreground commands; a background job runs until it ends or you kill it with process {action: "kill"}',
    });
  }
});
export type TerminalArgs = z.output<typeof TerminalArgs>;

export const ProcessArgs = z.strictObject({
  action: z.enum(['list', 'read', 'kill'])
    .describe('list: this session\'s background jobs; read: a job\'s output from an offset; kill: end a job\'s process tree.'),
  jobId: z.string().min(1).max(200).optional().describe('The job (from terminal with background: true). Needed by read and kill.'),
  offset: z.number().int().min(0).optional()
    .describe('read: byte offset to read from (default 0); pass the nextOffset of the previous read to get only new output.'),
  maxBytes: maxBytes.optional().describe('read: at most this many bytes of output.'),
}).superRefine((a, ctx) => {
  if (a.action !== 'list' && a.jobId === undefined) {
    ctx.addIssue({ code: 'custom', path: ['jobId'], message: `action "${a.action}" needs a jobId` });
  }
  if (a.action !== 'read') {
    for (const field of ['offset', 'maxBytes'] as const) {
      if (a[field] !== undefined) ctx.addIssue({ code: 'custom', path: [field], message: `${field} is only for action "read"` });
    }
  }
  if (a.action === 'list' && a.jobId !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['jobId'], message: 'action "list" takes no jobId' });
  }
});
export type ProcessArgs = z.output<typeof ProcessArgs>;

export const ReadFileArgs = z.strictObject({
  path: path.describe('File in the sandbox (absolute, or relative to the sandbox\'s working directory).'),
  maxBytes: maxBytes.optional().describe('Refuse the read when the file is larger than this many bytes.'),
});
export type ReadFileArgs = z.output<typeof ReadFileArgs>;

const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/;

export const WriteFileArgs = z.strictObject({
  path: path.describe('File to create or replace in the sandbox; missing parent directories are created.'),
  content: z.string().max(MAX_CONTENT_CHARS).describe('The file\'s content: text, or base64 when encoding is "base64".'),
  encoding: z.enum(['utf8', 'base64']).default('utf8').describe('How content is encoded (default utf8).'),
  mode: z.number().int().min(0).max(0o7777).optional().describe('File mode as a number, e.g. 493 for 0755.'),
}).superRefine((a, ctx) => {
  if (a.encoding === 'base64') {
    const compact = a.content.replace(/\s+/g, '');
    if (compact.length % 4 !== 0 || !BASE64_RE.test(compact)) {
      ctx.addIssue({ code: 'custom', path: ['content'], message: 'content is not valid base64 (A-Z a-z 0-9 + /, padded with = to a multiple of 4)' });
    }
  }
});
export type WriteFileArgs = z.output<typeof WriteFileArgs>;

export const ExportFileArgs = z.strictObject({
  path: path.describe('File or directory in the sandbox to copy out to the host.'),
  maxBytes: z.number().int().min(1).optional().describe('Refuse the export when it is larger than this many bytes.'),
});
export type ExportFileArgs = z.output<typeof ExportFileArgs>;
