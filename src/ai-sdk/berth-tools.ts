import { readFileTool, writeFileTool } from './file-tools.js';
import { jobKillTool, jobReadTool, jobStartTool } from './job-tools.js';
import { shellTool } from './shell-tool.js';
import { toolLimits, type BerthToolsOptions } from './tool-options.js';
import type { ToolSession } from './tool-session.js';

/**
 * Tools for the Vercel AI SDK (`generateText`, `streamText`, agents) bound to one berth session:
 * every call runs in that conversation's sandbox, local (`broker.session(...)`) or remote
 * (`new BerthClient(...).session(...)`). A berth error is a result the model reads
 * (`{error: {code, message}}`); a timeout is a result too (exit code 124).
 *
 * @example
 * ```ts
 * import { generateText, stepCountIs } from 'ai';
 * import { berthTools } from 'berth/ai-sdk';
 * await using chat = broker.session({ session: 'chat-42' });
 * const { text } = await generateText({ model, tools: berthTools(chat), stopWhen: stepCountIs(10), prompt: 'Run the tests' });
 * ```
 */
export function berthTools(session: ToolSession, opts?: BerthToolsOptions) {
  const limits = toolLimits(opts);
  return {
    shell: shellTool(session, limits),
    read_file: readFileTool(session, limits),
    write_file: writeFileTool(session),
    job_start: jobStartTool(session),
    job_read: jobReadTool(session, limits),
    job_kill: jobKillTool(session),
  };
}
