import { describe, expect, it } from 'vitest';
import type { Sandbox } from '../../src/backends/backend.js';
import { SandboxShells, type LiveShell } from '../../src/broker/shell-pool.js';
import { Logger } from '../../src/logging/logger.js';
import type { PersistentShell } from '../../src/shell/persistent-shell.js';
import type { Warden } from '../../src/shell/warden.js';

/*
 * How a sandbox's shells decide it has a background job: a job its shells list, or a process its
 * command groups hold that is not one of this process's live shells (named by host pid). A shell
 * whose pid is not known, or that failed to open, names nothing; a read of the groups that fails
 * counts as a job.
 */

interface FakeShell {
  hostPid?: number | undefined;
  busy?: boolean;
  jobs?: number;
}

function shellsOf(shells: Array<FakeShell | 'failed'>, groups: Sandbox['processGroups']): SandboxShells {
  const sandbox = { ref: 'ref-1', name: 'n', defaultCwd: '/', processGroups: groups } as unknown as Sandbox;
  const s = new SandboxShells(sandbox, { mayKillAll: true, log: Logger.silent(), warden: {} as Warden });
  shells.forEach((f, i) => {
    if (f === 'failed') {
      const p = Promise.reject(new Error('did not open'));
      p.catch(() => undefined);
      s.byShell.set(`shell-${i}`, p);
      return;
    }
    const shell = { hostPid: f.hostPid, busy: f.busy ?? false, backgroundJobCount: () => f.jobs ?? 0 } as unknown as PersistentShell;
    s.byShell.set(`shell-${i}`, Promise.resolve({ shell, tenant: 't', profile: 'p', sessionRef: 's', recordedCwd: undefined } satisfies LiveShell));
  });
  return s;
}

/** Command groups that answer `answer` and record the own-shell pids each call was given. */
function groupsAnswering(answer: boolean | Error): { groups: Sandbox['processGroups']; asked: Array<number[]> } {
  const asked: Array<number[]> = [];
  const groups = {
    commandsRunning(own?: ReadonlySet<number>): boolean {
      asked.push([...(own ?? [])].sort((a, b) => a - b));
      if (answer instanceof Error) throw answer;
      return answer;
    },
  } as unknown as Sandbox['processGroups'];
  return { groups, asked };
}

describe('SandboxShells: background jobs', () => {
  it('asks the command groups with the host pids of this process\'s live shells only', async () => {
    const { groups, asked } = groupsAnswering(false);
    const s = shellsOf([{ hostPid: 101 }, { hostPid: 202 }, { hostPid: undefined }, 'failed'], groups);
    expect(await s.hasBackgroundJobs()).toBe(false);
    expect(asked).toEqual([[101, 202]]);
  });

  it('a process the groups count (not one of the shells) is a background job', async () => {
    const { groups, asked } = groupsAnswering(true);
    const s = shellsOf([{ hostPid: 101 }], groups);
    expect(await s.hasBackgroundJobs()).toBe(true);
    expect(await s.busy()).toBe(true);
    expect(asked).toEqual([[101], [101]]);
  });

  it('a job a shell lists counts without reading the groups', async () => {
    const { groups, asked } = groupsAnswering(false);
    const s = shellsOf([{ hostPid: 101 }, { hostPid: 202, jobs: 1 }], groups);
    expect(await s.hasBackgroundJobs()).toBe(true);
    expect(asked).toEqual([]);
  });

  it('a shell running a command makes the sandbox busy', async () => {
    const { groups } = groupsAnswering(false);
    expect(await shellsOf([{ hostPid: 101, busy: true }], groups).busy()).toBe(true);
    expect(await shellsOf([{ hostPid: 101 }], groups).busy()).toBe(false);
  });

  it('groups that cannot be read count as a job; a sandbox without groups has only its shells\' jobs', async () => {
    expect(await shellsOf([{ hostPid: 101 }], groupsAnswering(new Error('EACCES')).groups).hasBackgroundJobs()).toBe(true);
    expect(await shellsOf([{ hostPid: 101 }], undefined).hasBackgroundJobs()).toBe(false);
  });
});
