import type { ResumeReport } from '../shell/types.js';

/** The report of a sandbox resumed from hibernation whose shell did (or did not) load its saved state. */
export function resumeReport(hibernatedMs: number, shellStateLoaded: boolean, volatileDirs: readonly string[]): ResumeReport {
  const shellState = ['cwd', 'exported variables', 'functions', 'aliases'];
  return {
    hibernatedMs,
    restored: shellStateLoaded ? ['files', ...shellState] : ['files'],
    lost: [
      'running processes',
      ...(shellStateLoaded ? [] : shellState),
      'unexported variables', 'shell options', 'traps',
      ...volatileDirs.map((d) => `${d} (tmpfs)`),
    ],
  };
}

/** One line for people: when the sandbox was hibernated, and what its resume kept and lost. */
export function describeResume(sandboxKey: string, r: ResumeReport, nowMs = Date.now()): string {
  const ago = Math.max(0, Math.round((nowMs - r.hibernatedMs) / 1000));
  return `sandbox "${sandboxKey}" was hibernated ${ago} s ago and resumed for this command: kept ${r.restored.join(', ')}; not kept: ${r.lost.join(', ')}`;
}

/**
 * One line for people when a call's sandbox had gone and a new, empty one took its place: removed
 * outside berth, or by berth's reaper while its session was open (the process that held it ended,
 * or it idled out).
 */
export function describeRecreated(sandboxKey: string): string {
  return `sandbox "${sandboxKey}" was gone (removed outside berth, or by berth's reaper after the process holding its session ended or it went idle) and was recreated empty for this command`;
}
