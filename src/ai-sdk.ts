/**
 * `berth/ai-sdk`: tools for the Vercel AI SDK (`ai`, v6) bound to a berth session, local or
 * remote: a shell with timeout and workdir, file read and write, background jobs. It loads
 * nothing of the SDK (its types only) and nothing of the broker or the client.
 *
 * @example
 * ```ts
 * import { generateText, stepCountIs } from 'ai';
 * import { BerthClient } from 'berth/client';
 * import { berthTools } from 'berth/ai-sdk';
 * const chat = new BerthClient({ url, token }).session({ session: 'chat-42' });
 * await generateText({ model, tools: berthTools(chat), stopWhen: stepCountIs(10), prompt: 'Fix the failing test' });
 * ```
 */
export { berthTools } from './ai-sdk/berth-tools.js';
export type { BerthToolsOptions } from './ai-sdk/tool-options.js';
export type { ToolSession } from './ai-sdk/tool-session.js';
export type { ToolFailure } from './ai-sdk/tool-answer.js';
export type { ShellInput, ShellOutput } from './ai-sdk/shell-tool.js';
export type { JobReadOutput } from './ai-sdk/job-tools.js';
