import type { Tool } from 'ai';
import { z } from 'zod';
import { answer, type ToolFailure } from './tool-answer.js';
import type { ToolLimits } from './tool-options.js';
import type { ToolSession } from './tool-session.js';

export interface ShellInput {
  command: string;
  timeoutSeconds?: number | undefined;
  workdir?: string | undefined;
}

export interface ShellOutput {
  exitCode: number;
  /** stdout and stderr interleaved in arrival order. */
  output: string;
  cwd: string;
  timedOut: boolean;
  truncated: boolean;
}

/** One command in the session's persistent shell: cd, exports and files carry over to the next call. */
export function shellTool(session: ToolSession, limits: ToolLimits): Tool<ShellInput, ShellOutput | ToolFailure> {
  return {
    description:
      'Run one bash command line in this conversation\'s sandbox. The shell persists between calls (cd, exported variables and files ' +
      'carry over). Returns the exit code, stdout and stderr interleaved, and the cwd after the command. A command over its timeout is ' +
      `killed (exit code 124, timedOut). For anything that runs long (a server, a watch), use job_start instead.`,
    inputSchema: z.object({
      command: z.string().min(1).describe('the bash command line'),
      timeoutSeconds: z.number().int().positive().max(limits.maxTimeoutSeconds).optional()
        .describe(`kill the command after this many seconds (at most ${limits.maxTimeoutSeconds}; default: the sandbox's)`),
      workdir: z.string().min(1).optional().describe('run this one command in this directory (the shell\'s cwd stays where it was)'),
    }),
    execute: (input, { abortSignal }) => answer(async () => {
      const r = await session.exec(input.command, { timeoutSeconds: input.timeoutSeconds, workdir: input.workdir, signal: abortSignal });
      return { exitCode: r.exitCode, output: r.output, cwd: r.cwd, timedOut: r.timedOut, truncated: r.truncated };
    }),
  };
}
