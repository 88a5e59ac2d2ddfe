import type { Tool } from 'ai';
import { z } from 'zod';
import { answer, type ToolFailure } from './tool-answer.js';
import type { ToolLimits } from './tool-options.js';
import type { ToolSession } from './tool-session.js';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

const path = z.string().min(1).describe('path in the sandbox (absolute, or relative to the sandbox\'s default directory)');

/** A text file out of the sandbox, whole; a file that is not UTF-8 text is an answer saying so. */
export function readFileTool(session: ToolSession, limits: ToolLimits): Tool<{ path: string }, { path: string; content: string } | ToolFailure> {
  return {
    description: `Read a UTF-8 text file from the sandbox (at most ${limits.maxReadBytes} bytes). For a part of a larger file, use the shell (head, sed -n).`,
    inputSchema: z.object({ path }),
    execute: (input) => answer(async () => {
      const r = await session.files.readFile({ path: input.path, maxBytes: limits.maxReadBytes });
      try {
        return { path: r.path, content: strictUtf8.decode(r.data) };
      } catch {
        return { error: { code: 'not_text', message: `${r.path} is not UTF-8 text (${r.data.length} bytes); inspect it with the shell (file, xxd, base64)` } };
      }
    }),
  };
}

/** A text file into the sandbox: created with its parent directories, or replaced. */
export function writeFileTool(session: ToolSession): Tool<{ path: string; content: string }, { path: string; bytes: number } | ToolFailure> {
  return {
    description: 'Write a UTF-8 text file in the sandbox, creating its parent directories; an existing file is replaced.',
    inputSchema: z.object({ path, content: z.string().describe('the whole content of the file') }),
    execute: (input) => answer(() => session.files.upload({ path: input.path, data: Buffer.from(input.content, 'utf8') })),
  };
}
