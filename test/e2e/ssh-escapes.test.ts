import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { PROBE_SCRIPT } from '../../src/backends/ssh/account-scripts.js';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { escapeSuite } from '../helpers/escapes.js';
import { sshConfigSection, SshInstalls } from '../helpers/ssh-e2e.js';
import { describeSsh } from '../helpers/sshd.js';

/*
 * docs/design.md §5 on ssh: every process of an SSH sandbox starts in its account's cgroup on the
 * host (the launcher joins it as root before it drops to the account), and each command of a
 * persistent shell runs in a group of its own below it, managed by berth's root agent there; so
 * what a command starts ends at its timeout, a disconnect or its job's kill, whatever it does to
 * its environment, session, parentage or name. The account cannot write the hierarchy. The test
 * sshd is on this host, so the suite sees the sandbox's processes in this /proc.
 */

let installs: SshInstalls | undefined;
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) await b.close({ graceMs: 2_000 }).catch(() => undefined);
  await installs?.cleanup();
  installs = undefined;
}, 120_000);

describeSsh('escaped processes in an ssh sandbox', () => {
  escapeSuite({
    open: async () => {
      installs ??= new SshInstalls();
      const config = parseConfig({ backend: 'ssh', persistent: false, ssh: { ...sshConfigSection(), maxProcesses: 256 }, exec: { timeoutSeconds: 30 } });
      const broker = await Broker.open({ config, berthHome: installs.newHome(), env: { PATH: process.env['PATH'] } });
      brokers.push(broker);
      return broker;
    },
    cgroupfsClosed: true,
    bounded: true,
    emptyGroupsGo: 'with-shell',
  });
});

/** This process's cgroup2 mount: the test sshd is on this host, so the sandboxes' groups are under it. */
function cgroup2Mount(): string {
  const line = readFileSync('/proc/self/mounts', 'utf8').split('\n').find((l) => l.split(' ')[2] === 'cgroup2');
  if (line === undefined) throw new Error('no cgroup2 mount on this host');
  return line.split(' ')[1] as string;
}

describeSsh('the cgroups of an ssh sandbox', () => {
  async function open(): Promise<Broker> {
    installs ??= new SshInstalls();
    const config = parseConfig({ backend: 'ssh', persistent: true, ssh: sshConfigSection(), exec: { timeoutSeconds: 30 } });
    const broker = await Broker.open({ config, berthHome: installs.newHome(), env: { PATH: process.env['PATH'] } });
    brokers.push(broker);
    return broker;
  }

  it('the account cannot leave, make or reach a group, nor look at the others', async () => {
    const b = await open();
    const S = { session: 'cg' };
    const group = (await b.exec(S, 'sed -n "s/^0:://p" /proc/self/cgroup')).stdout.trim();
    expect(group).toMatch(/^\/berth-ssh\/berth-[0-9a-f]{24}\/c-[0-9a-f]{12}$/);
    const dir = join(cgroup2Mount(), group);
    const tries = await b.exec(S, [
      `echo $$ > ${dir}/../cgroup.procs && echo moved-up`,
      `echo $$ > ${cgroup2Mount()}/cgroup.procs && echo moved-root`,
      `mkdir ${dir}/mine && echo made`,
      `ls ${cgroup2Mount()}/berth-ssh && echo listed`,
      'sed -n "s/^0:://p" /proc/self/cgroup',
    ].join('; '));
    expect(tries.stdout.trim()).toBe(group);
    expect(tries.stderr).toMatch(/Permission denied/);
    expect(statSync(join(cgroup2Mount(), 'berth-ssh')).mode & 0o777).toBe(0o700);
  });

  it('a stopped sandbox has no group left; its next command makes them again', async () => {
    const b = await open();
    const S = { session: 'cg-stop' };
    const group = (await b.exec(S, 'sleep 1000 >/dev/null 2>&1 & sed -n "s/^0:://p" /proc/self/cgroup')).stdout.trim();
    const account = group.split('/')[2] as string;
    const accountDir = join(cgroup2Mount(), 'berth-ssh', account);
    expect(existsSync(accountDir)).toBe(true);
    await b.closeSession(S);
    expect((await installs!.accounts().stop(account)).killed).toBeGreaterThan(0);
    expect(existsSync(accountDir)).toBe(false);
    const again = await b.exec(S, 'sed -n "s/^0:://p" /proc/self/cgroup');
    expect(again.stdout.trim()).toMatch(new RegExp(`^/berth-ssh/${account}/c-[0-9a-f]{12}$`));
  });

  it('the host probe says `missing cgroups` where no cgroup2 is mounted, and nothing where it is', () => {
    const probe = (prelude: string): string => execFileSync('unshare', ['--mount', '--propagation', 'private', '--', 'bash', '-c', `${prelude}\n${PROBE_SCRIPT}`], { encoding: 'utf8' });
    expect(probe('')).not.toContain('missing cgroups');
    const mount = cgroup2Mount();
    expect(probe(`umount -l ${mount}`)).toContain('missing cgroups');
  });
});
