import type { CallToolResult, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod';
import type { Broker } from '../../broker/broker.js';
import type { CallScopeInput } from '../../scope/call-scope.js';
import { text } from './tool-results.js';

/** How the server registers one tool (see `createMcpServer`). */
export type AddTool = <S extends z.ZodType<Record<string, unknown>>>(
  name: string,
  config: { title: string; description: string; annotations: ToolAnnotations },
  schema: S,
  run: (args: z.output<S>) => Promise<CallToolResult>,
) => void;

const name = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/)
  .describe('1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit, e.g. "before-migration"');

const SnapshotCreateArgs = z.strictObject({ name: name.optional() });
const SnapshotListArgs = z.strictObject({});
const SnapshotRestoreArgs = z.strictObject({ name });

/**
 * The tools an agent checkpoints and rolls back with: `snapshot_create` before a risky step,
 * `snapshot_restore` after it went wrong, `snapshot_list`. A fork is no tool: it makes another
 * session, which this connection's agent is not bound to (an operator's or a library's action).
 */
export function addSnapshotTools(add: AddTool, broker: Broker, scope: CallScopeInput): void {
  add('snapshot_create', {
    title: 'Checkpoint the sandbox',
    description: 'Saves this session\'s sandbox as a named snapshot: its files, and the shell\'s cwd and exported variables. ' +
      'Make one before a risky step (a migration, a mass edit, an upgrade) and go back to it with snapshot_restore if the step goes wrong. ' +
      'Refused while a command or background job runs, and when a file holds the value of a secret you were given.',
    annotations: { destructiveHint: false },
  }, SnapshotCreateArgs, async (a) => {
    const s = await broker.snapshots.create(scope, { name: a.name });
    return text(`snapshot "${s.name}" of sandbox "${s.sandboxKey}" saved (${s.bytes} bytes); restore it with snapshot_restore {"name": "${s.name}"}`, { ...s });
  });

  add('snapshot_list', {
    title: 'List checkpoints',
    description: 'Lists the snapshots of this session\'s sandbox, oldest first, with their names and sizes.',
    annotations: { readOnlyHint: true },
  }, SnapshotListArgs, async () => {
    const list = broker.snapshots.list(broker.snapshots.tenantOf(scope), scope);
    const lines = list.map((s) => `${s.name}  ${s.bytes} bytes  made ${new Date(s.createdMs).toISOString()}`);
    return text(lines.length === 0 ? 'no snapshots of this sandbox' : lines.join('\n'), { snapshots: list });
  });

  add('snapshot_restore', {
    title: 'Roll back to a checkpoint',
    description: 'Puts this session\'s sandbox back to a snapshot made with snapshot_create: every file as it was then, and the shell ' +
      'back in that cwd with those exported variables. Everything done since is lost (snapshot first to keep it). ' +
      'A restore that fails changes nothing and says so.',
    annotations: { destructiveHint: true },
  }, SnapshotRestoreArgs, async (a) => {
    const r = await broker.snapshots.restore(scope, a.name);
    return text(`sandbox "${r.sandboxKey}" restored to snapshot "${r.name}"${r.cwd === null ? '' : `; the shell resumes in ${r.cwd}`}`, { ...r });
  });
}
