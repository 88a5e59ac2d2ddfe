import { z } from 'zod';
import { BACKEND_NAMES } from '../backends/registry.js';

/** Per-task settings an operator may set through the library or server API (design §3). */
export const TaskOverrideSchema = z.strictObject({
  image: z.string().min(1).max(256).optional(),
  backend: z.enum(BACKEND_NAMES).optional(),
  cwd: z.string().min(1).max(4096).optional(),
  cwdSource: z.enum(['session', 'process']).optional(),
});

export type TaskOverride = z.infer<typeof TaskOverrideSchema>;

/** An image or backend override gives the task its own sandbox (auto row 1); a cwd does not. */
export function overrideIsolates(o: TaskOverride | undefined): boolean {
  return o !== undefined && (o.image !== undefined || o.backend !== undefined);
}
