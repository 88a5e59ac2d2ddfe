import type { Tool } from 'ai';
import { z } from 'zod';
import { answer, type ToolFailure } from './tool-answer.js';
import type { ToolLimits } from './tool-options.js';
import type { ToolSession } from './tool-session.js';

const jobId = z.string().min(1).describe('the jobId job_start answered');

export interface JobReadOutput {
  output: string;
  nextOffset: number;
  done: boolean;
  exitCode: number | null;
  status: string;
}

/** A background job: it outlives the call and the shell stays free. */
export function jobStartTool(session: ToolSession): Tool<{ command: string; workdir?: string | undefined }, { jobId: string } | ToolFailure> {
  return {
    description: 'Start a command in the background in the sandbox (a build, a test run, a server). Read its output with job_read, end it with job_kill.',
    inputSchema: z.object({
      command: z.string().min(1).describe('the bash command line'),
      workdir: z.string().min(1).optional().describe('run it in this directory'),
    }),
    execute: (input) => answer(async () => ({ jobId: (await session.jobs.start(input.command, { workdir: input.workdir })).jobId })),
  };
}

/** A job's output from an offset, and whether it ended (with its exit code). */
export function jobReadTool(session: ToolSession, limits: ToolLimits): Tool<{ jobId: string; offset?: number | undefined }, JobReadOutput | ToolFailure> {
  return {
    description: `Read a background job's output from a byte offset (at most ${limits.maxJobReadBytes} bytes), its status, and its exit code once done. ` +
      'Pass the nextOffset of the previous read to get only what is new.',
    inputSchema: z.object({ jobId, offset: z.number().int().min(0).optional().describe('byte offset to read from (default 0)') }),
    execute: (input) => answer(async () => {
      const r = await session.jobs.read(input.jobId, { offset: input.offset, maxBytes: limits.maxJobReadBytes });
      return { output: r.output, nextOffset: r.nextOffset, done: r.done, exitCode: r.exitCode, status: r.status };
    }),
  };
}

/** Ends a job's process tree (nothing else in the sandbox). */
export function jobKillTool(session: ToolSession): Tool<{ jobId: string }, { killed: boolean } | ToolFailure> {
  return {
    description: 'Kill a background job and every process it started. killed is false when it had already ended.',
    inputSchema: z.object({ jobId }),
    execute: (input) => answer(async () => ({ killed: (await session.jobs.kill(input.jobId)).killed })),
  };
}
