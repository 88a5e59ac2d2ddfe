import { afterEach } from 'vitest';
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
