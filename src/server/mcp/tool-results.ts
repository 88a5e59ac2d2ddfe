import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { BrokerExecResult } from '../../broker/broker.js';
import type { BerthError } from '../../errors.js';
import { describeRecreated, describeResume } from '../../broker/resume-report.js';

/*
 * Formatting for agents, done once at the MCP edge: a text block the model reads, plus
 * structuredContent with the same facts for programs. A failed, timed-out or refused call is a
 * result with isError: true, never a protocol error.
 */

export function text(body: string, structured?: Record<string, unknown>, isError = false): CallToolResult {
  return {
    content: [{ type: 'text', text: body }],
    ...(structured !== undefined ? { structuredContent: structured } : {}),
    ...(isError ? { isError: true } : {}),
  };
}

/** A command's result: exit code, cwd, flags, then stdout and stderr. Non-zero exit or timeout is isError. */
export function execResult(r: BrokerExecResult, timeoutSeconds: number): CallToolResult {
  const head: string[] = [];
  if (r.timedOut) {
    head.push(`timed out after ${timeoutSeconds} s: the command's process tree was killed (exit code ${r.exitCode}); the shell is still usable`);
  } else {
    head.push(r.exitCode === 0 ? 'exit code 0' : `exit code ${r.exitCode} (the command failed)`);
  }
  head.push(`cwd ${r.cwd}`);
  if (r.truncated) head.push('output truncated: the middle was cut, the head and tail are kept');
  if (r.shellReplaced) head.push('the shell was replaced; cwd and exported variables were restored');
  if (r.sandboxRecreated) head.push(describeRecreated(r.sandboxKey));
  if (r.sandboxResumed) head.push(describeResume(r.sandboxKey, r.sandboxResumed));
  const body = [head.join('\n')];
  if (r.stdout !== '') body.push(`[stdout]\n${r.stdout}`);
  if (r.stderr !== '') body.push(`[stderr]\n${r.stderr}`);
  if (r.stdout === '' && r.stderr === '') body.push('(no output)');
  return text(body.join('\n'), {
    exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, cwd: r.cwd, timedOut: r.timedOut, truncated: r.truncated, durationMs: r.durationMs,
    sandboxKey: r.sandboxKey,
    ...(r.shellReplaced ? { shellReplaced: true } : {}),
    ...(r.sandboxRecreated ? { sandboxRecreated: true } : {}),
    ...(r.sandboxResumed ? { sandboxResumed: r.sandboxResumed } : {}),
  }, r.exitCode !== 0 || r.timedOut);
}

/** berth refused or could not run the call (policy, missing image, backend down): readable, isError. */
export function refusal(err: BerthError): CallToolResult {
  return text(`berth could not run this call (${err.code}): ${err.message}`, { error: { code: err.code, message: err.message } }, true);
}

/** A bug in berth met while a tool ran: readable and isError, saying whose fault it is; nothing of the error itself. */
export function bugResult(tool: string): CallToolResult {
  const message = `berth failed while running ${tool}: this is a bug in berth, not in your call; the server log has the details, and the operator can report it with them`;
  return text(message, { error: { code: 'internal', message } }, true);
}

/** Decodes bytes as UTF-8 when they are valid UTF-8; otherwise base64. */
export function decodeBytes(data: Buffer): { encoding: 'utf8' | 'base64'; content: string } {
  try {
    return { encoding: 'utf8', content: new TextDecoder('utf-8', { fatal: true }).decode(data) };
  } catch {
    return { encoding: 'base64', content: data.toString('base64') };
  }
}
