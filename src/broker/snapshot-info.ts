import { UsageError } from '../errors.js';
import type { SnapshotRecord } from './state/snapshot-table.js';

/** A name a caller may give a snapshot (a base snapshot's starts with `@`, which this never does). */
const SNAPSHOT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** A snapshot as the library, CLI, HTTP and MCP show it: never a host path or backend ref. */
export interface SnapshotInfo {
  name: string;
  sandboxKey: string;
  profile: string;
  session: string | null;
  user: string | null;
  backend: string;
  bytes: number;
  createdMs: number;
}

/** What a restore did. */
export interface RestoreResult {
  name: string;
  sandboxKey: string;
  /** The cwd the next command of the restoring shell starts in (the snapshot's), when it recorded one. */
  cwd: string | null;
}

/** What a fork made. */
export interface ForkResult {
  session: string;
  sandboxKey: string;
  /** The named snapshot it started from, or null: the source's state at the fork (kept as the fork's base until its sandbox goes). */
  from: string | null;
  cwd: string | null;
}

/** Refuses a name no caller may give a snapshot, saying which names are valid. */
export function assertSnapshotName(name: string): void {
  if (!SNAPSHOT_NAME.test(name)) {
    throw new UsageError(`snapshot name "${name}" is not valid; use 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit`);
  }
}

/** What the surfaces show of a snapshot's record. */
export function infoOf(r: SnapshotRecord): SnapshotInfo {
  return { name: r.name, sandboxKey: r.sandboxKey, profile: r.profile, session: r.session, user: r.user, backend: r.backend, bytes: r.bytes, createdMs: r.createdMs };
}
