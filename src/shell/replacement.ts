/**
 * What a new shell has of the one it replaced, told from the tag of the snapshot it loaded:
 * - `saved`: the old shell dumped its state as it ended (the snapshot carries its tag);
 * - `start`: it could not; the snapshot is the one the old shell itself started from;
 * - `older`: it could not; the snapshot is another, older one;
 * - `none`: there was no snapshot to load.
 */
export type RestoredFrom = 'saved' | 'start' | 'older' | 'none';

export function restoredFrom(loadedFrom: string, oldTag: string, oldLoadedFrom: string): RestoredFrom {
  if (loadedFrom === '') return 'none';
  if (loadedFrom === oldTag) return 'saved';
  return loadedFrom === oldLoadedFrom ? 'start' : 'older';
}

export interface Replacement {
  from: RestoredFrom;
  /** The new shell's cwd (redacted). */
  cwd: string;
  /** Background jobs the old shell had; they keep running unless `jobsEnded`. */
  jobs: number;
  /** The old shell's whole family was killed to make room for the new shell. */
  jobsEnded: boolean;
  /** Every process of the sandbox was killed to make room (containers only). */
  sandboxCleared: boolean;
}

const NEVER_KEPT = 'unexported variables, shell options and traps are not kept';

/** One sentence, exact about what the new shell restored and what was lost. */
export function describeReplacement(r: Replacement): string {
  let s: string;
  switch (r.from) {
    case 'saved':
      s = `a new shell took over in ${r.cwd} with the exported variables, functions and aliases of the old one (${NEVER_KEPT})`;
      break;
    case 'start':
      s = `the old shell could not save its state: a new shell took over in ${r.cwd} with the exported variables, functions and aliases ` +
        `the old one had started with; changes made since were lost (${NEVER_KEPT})`;
      break;
    case 'older':
      s = `the old shell could not save its state: a new shell took over in ${r.cwd} with exported variables, functions and aliases ` +
        `from an older save; changes made since were lost (${NEVER_KEPT})`;
      break;
    case 'none':
      s = `the old shell could not save its state: a new shell took over in ${r.cwd}; the exported variables, functions and aliases ` +
        `of the old one were lost (${NEVER_KEPT})`;
      break;
  }
  if (r.sandboxCleared) {
    s += '; the sandbox had no room for a new shell, so every process in it was killed (other shells there were replaced too)';
  } else if (r.jobsEnded) {
    s += '; the sandbox had no room for a new shell, so the old shell\'s background jobs were killed too';
  } else if (r.jobs > 0) {
    s += `; ${r.jobs} background job(s) of earlier commands keep running, outside the new shell's job table`;
  }
  return s;
}

/** How a shell that ended by itself is described: `exit N`, a signal, or unknown. */
export function describeEnd(code: number | null): string {
  if (code === null) return 'the shell ended unexpectedly (was the sandbox removed?)';
  if (code === 137) return 'the shell was killed by signal 9 (out of memory, or killed)';
  if (code > 128) return `the shell was killed by signal ${code - 128}`;
  return `the shell exited with status ${code}`;
}
