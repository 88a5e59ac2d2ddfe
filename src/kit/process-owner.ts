import { readFileSync } from 'node:fs';

/** `pid:starttime` of a process, so a reused pid is never mistaken for the owner. */
function statOf(pid: number): { state: string; start: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields 3 (state) and 22 (starttime) counted after the `(comm)` field, which may contain spaces.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: rest[0] ?? '', start: rest[19] ?? '' };
  } catch {
    return undefined;
  }
}

export function ownerToken(pid: number = process.pid): string {
  return `${pid}:${statOf(pid)?.start || '0'}`;
}

/** True when the process that wrote `owner` is still running. */
export function ownerAlive(owner: string): boolean {
  const [pidText, start] = owner.split(':');
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  const stat = statOf(pid);
  // A killed owner whose parent has not reaped it yet is a zombie: dead, though /proc still lists it.
  return stat !== undefined && stat.start === start && stat.state !== 'Z' && stat.state !== 'X';
}
