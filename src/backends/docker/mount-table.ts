import { readFile } from 'node:fs/promises';
import path from 'node:path';

/** One line of /proc/self/mountinfo, as far as berth reads it. */
export interface MountEntry {
  /** Where it is mounted, in this process's mount namespace. */
  target: string;
  /** What is mounted (a device such as `/dev/loop3`). */
  source: string;
  fstype: string;
}

/**
 * Parses /proc/self/mountinfo (proc(5)): `id parent maj:min root target options [optional...] -
 * fstype source superoptions`, with space, tab, newline and backslash in paths written as octal
 * escapes. Pure; malformed lines are skipped.
 */
export function parseMountInfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    const fields = line.split(' ');
    const dash = fields.indexOf('-', 6);
    const target = fields[4];
    const fstype = fields[dash + 1];
    const source = fields[dash + 2];
    if (dash < 0 || target === undefined || fstype === undefined || source === undefined) continue;
    out.push({ target: unescapeOctal(target), source: unescapeOctal(source), fstype });
  }
  return out;
}

function unescapeOctal(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** The mounts of this process's namespace whose target is `dir` itself or lies under it. */
export async function mountsUnder(dir: string): Promise<MountEntry[]> {
  const root = path.resolve(dir);
  const all = parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8'));
  return all.filter((m) => m.target === root || m.target.startsWith(root + path.sep));
}
