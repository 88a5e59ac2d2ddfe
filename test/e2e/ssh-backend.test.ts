import { readdirSync, readFileSync } from 'node:fs';
import { afterEach, expect, it, vi } from 'vitest';
import { sshModule } from '../../src/backends/ssh/module.js';
import { Broker } from '../../src/broker/broker.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthError } from '../../src/errors.js';
import { Logger } from '../../src/logging/logger.js';
import { pidsWithArg, waitExactArgv, waitNoneWithArg } from '../helpers/processes.js';
import { sshConfigSection, SshInstalls } from '../helpers/ssh-e2e.js';
import { describeSsh, sshTarget } from '../helpers/sshd.js';

const VICTIM_SLEEP = '4411.75';

/*
 * The ssh backend through the Broker against the real test sshd on loopback (so the host's
 * /proc is this machine's: a test can look behind berth's back).
 */

let installs: SshInstalls | undefined;
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) await b.close({ graceMs: 2_000 }).catch(() => undefined);
  const left = await installs?.cleanup();
  installs = undefined;
  if (left !== undefined && left.length > 0) console.log(`removed accounts: ${left.join(', ')}`);
}, 120_000);

async function open(extra: Record<string, unknown> = {}, berthHome?: string): Promise<Broker> {
  installs ??= new SshInstalls();
  const config = parseConfig({ backend: 'ssh', persistent: false, ssh: sshConfigSection(), exec: { timeoutSeconds: 30 }, ...extra });
  const broker = await Broker.open({ config, berthHome: berthHome ?? installs.newHome(), env: { PATH: process.env['PATH'] } });
  brokers.push(broker);
  return broker;
}

/** The parent pid of a host process (from /proc, as root). */
function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** The host pid of the process of `uid` that is `nsPid` in its own PID namespace (its status's NSpid ends with it). */
function hostPidOf(uid: number, nsPid: number): number {
  for (const d of readdirSync('/proc').filter((e) => /^[0-9]+$/.test(e))) {
    try {
      const status = readFileSync(`/proc/${d}/status`, 'utf8');
      const ids = /^NSpid:\s+(.*)$/m.exec(status)?.[1]?.trim().split(/\s+/) ?? [];
      if (new RegExp(`^Uid:\\s+${uid}\\s`, 'm').test(status) && ids.length > 1 && ids.at(-1) === String(nsPid)) return Number(d);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no process of uid ${uid} is pid ${nsPid} in its namespace`);
}

/** The nearest sshd process above a host process (0 when there is none). */
function sshdAbove(pid: number): number {
  let p = parentOf(pid);
  while (p > 1 && commOf(p) !== 'sshd') p = parentOf(p);
  return p > 1 ? p : 0;
}

function commOf(pid: number): string {
  return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
}

describeSsh('the ssh backend through the broker (real sshd)', () => {
  it('two sessions on one host cannot see each other\'s files, environment or processes', async () => {
    const broker = await open();
    const [a, b] = [{ session: 'alice' }, { session: 'bob' }];
    const m = '4321.25';
    const set = await broker.exec(a, `echo private > note.txt; export ALICE_SECRET=s3cr3t-value; sleep ${m} & echo "$HOME $(id -u)"`);
    expect(set.exitCode, set.output).toBe(0);
    const [home, uid] = set.stdout.trim().split(' ') as [string, string];
    // Her sleep as the host sees it (its pid in her sandbox is another): the call returns before
    // the background child has surely exec'd it, so wait for the sleep itself.
    const [pid] = await waitExactArgv(['sleep', m]);
    expect(pid, `sleep ${m}`).toBeDefined();
    expect(readFileSync(`/proc/${pid}/environ`, 'latin1')).toContain('ALICE_SECRET=s3cr3t-value');
    try {
      const probe = await broker.exec(b, [
        'id -u',
        `cat ${home}/workspace/note.txt 2>/dev/null || echo no-file`,
        `ls ${home} >/dev/null 2>&1 || echo no-list`,
        'cat /proc/[0-9]*/environ 2>/dev/null | tr \'\\0\' \'\\n\' | grep -c ALICE_SECRET || echo no-env',
        `(for d in /proc/[0-9]*; do [ "$(stat -c %u "$d" 2>/dev/null)" = ${uid} ] && kill -0 "\${d#/proc/}" 2>/dev/null && exit 0; done; exit 1) || echo no-signal`,
        'ls /home/berth >/dev/null 2>&1 || echo no-listing-of-homes',
      ].join('; '));
      const [bobUid, ...rest] = probe.stdout.trim().split('\n');
      expect(bobUid).not.toBe(uid);
      expect(bobUid).not.toBe('0');
      expect(rest).toEqual(['no-file', 'no-list', '0', 'no-env', 'no-signal', 'no-listing-of-homes']);
      expect(pidsWithArg(m)).toHaveLength(1);
    } finally {
      await broker.closeSession(a);
    }
    // Closing alice's ephemeral sandbox removed her account, and her background process with it.
    expect(await waitNoneWithArg(m)).toEqual([]);
  });

  it('a connection dropped mid-session: the call says so, and the next call reconnects with cwd and env restored', async () => {
    const broker = await open();
    const s = { session: 'drop' };
    const set = await broker.exec(s, 'mkdir -p deep/er && cd deep/er && export KEPT=still-here && echo "$(id -u) $$"');
    expect(set.exitCode, set.output).toBe(0);
    const [uid, nsPid] = set.stdout.trim().split(' ').map(Number) as [number, number];
    // The sshd process serving this shell's connection (above the shell and the launcher's waiter),
    // killed as a dropped network would.
    const sshd = sshdAbove(hostPidOf(uid, nsPid));
    expect(commOf(sshd)).toBe('sshd');
    const long = `30.${process.pid}${Math.floor(Math.random() * 1000)}`;
    const during = broker.exec(s, `sleep ${long}; echo never`);
    // Cut once the command runs: cut before, the call would find the shell gone and run it on a new one.
    await vi.waitFor(() => expect(pidsWithArg(long)).toHaveLength(1), { timeout: 20_000 });
    process.kill(sshd, 'SIGKILL');
    const cut = await during.then((r) => r, (e: unknown) => e);
    if (cut instanceof BerthError) {
      expect(cut.code).toBe('backend_unavailable');
    } else {
      const r = cut as { exitCode: number; stdout: string; stderr: string; shellReplaced?: boolean };
      expect(r.stdout).not.toContain('never');
      expect(r.exitCode).not.toBe(0);
      // Said in the result: the shell ended, and what the new one took over.
      expect(r.stderr, JSON.stringify(r)).toMatch(/^berth: the shell ended unexpectedly.*a new shell took over in \S+\/workspace\/deep\/er with the exported variables/);
      expect(r.shellReplaced).toBe(true);
    }
    const after = await broker.exec(s, 'pwd; echo "$KEPT"');
    expect(after.exitCode, after.output).toBe(0);
    expect(after.stdout).toMatch(/\/workspace\/deep\/er\nstill-here\n$/);
  });

  it('20 concurrent sessions on one host all answer, each as its own account', async () => {
    const broker = await open();
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => broker.exec({ session: `c${i}` }, 'id -u; echo "$HOME"')));
    for (const r of results) expect(r.exitCode, r.output).toBe(0);
    const uids = results.map((r) => r.stdout.split('\n')[0]);
    expect(new Set(uids).size).toBe(20);
    expect(uids).not.toContain('0');
    const homes = results.map((r) => r.stdout.split('\n')[1]);
    for (const h of homes) expect(h).toMatch(/^\/home\/berth\/berth-[0-9a-f]{24}$/);
    expect(new Set(homes).size).toBe(20);
  }, 180_000);

  it('an unreachable host is backend_unavailable naming it, and nothing runs anywhere else', async () => {
    const broker = await open({ ssh: { ...sshConfigSection(), port: 1 } });
    const marker = `/tmp/berth-ssh-unreachable-${process.pid}`;
    const err = await broker.exec({ session: 'x' }, `touch ${marker}`).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('backend_unavailable');
    expect((err as BerthError).message).toContain('127.0.0.1:1');
    expect((err as BerthError).message).toContain('connection refused');
    expect(() => readFileSync(marker)).toThrow();
  });

  it('a ref naming another installation\'s account (a tampered or foreign record) is refused, and that account is untouched', async () => {
    const victim = await open({ persistent: true });
    const set = await victim.exec({ session: 'v' }, `echo mine > kept.txt; sleep ${VICTIM_SLEEP} & echo "$HOME"`);
    expect(set.exitCode, set.output).toBe(0);
    const account = set.stdout.trim().split('/').at(-1)!;
    const t = sshTarget();
    const forged = `ssh://${t.user}@${t.host}:${t.port}/home/berth/${account}`;
    const config = parseConfig({ backend: 'ssh', ssh: sshConfigSection() });
    const home = installs!.newHome();
    const store = StateStore.open(home);
    const installation = store.installationId;
    store.close();
    const attacker = await sshModule.create({ berthHome: home, installation, log: Logger.silent(), lease: (_n, fn) => fn(), places: [config.base.ssh] });
    try {
      for (const attempt of [() => attacker.remove(forged, undefined), () => attacker.stop(forged)]) {
        const err = await attempt().then(() => undefined, (e: unknown) => e);
        expect(err).toBeInstanceOf(BerthError);
        expect((err as BerthError).message).toContain(`account ${account} belongs to another berth installation`);
      }
      expect((await attacker.listManaged()).map((m) => m.name)).not.toContain(account);
    } finally {
      await attacker.close();
    }
    expect(pidsWithArg(VICTIM_SLEEP)).toHaveLength(1);
    expect((await victim.exec({ session: 'v' }, 'cat kept.txt')).stdout).toBe('mine\n');
    await victim.exec({ session: 'v' }, 'kill %1');
  });

  it('persistent sandboxes are the same accounts after a berth restart, with their files; a session keeps its own (persistent) one past its close', async () => {
    installs ??= new SshInstalls();
    const home = installs.newHome();
    const first = await open({ persistent: true }, home);
    const made = await first.exec({}, 'echo kept > p.txt; id -u');
    expect(made.exitCode, made.output).toBe(0);
    const eph = await first.exec({ session: 'e' }, 'echo "$HOME"');
    await first.closeSession({ session: 'e' });
    await first.close();
    brokers.splice(brokers.indexOf(first), 1);
    const again = await open({ persistent: true }, home);
    const r = await again.exec({}, 'cat p.txt; id -u');
    expect(r).toMatchObject({ exitCode: 0, stdout: `kept\n${made.stdout.trim().split('\n').at(-1)}\n` });
    expect(r.sandboxRecreated).toBeUndefined();
    expect(eph.stdout).toMatch(/^\/home\/berth\/berth-[0-9a-f]{24}\n$/);
    // Design §3: ssh keys sessions apart even when persistent, and a persistent one outlives its close.
    expect(eph.stdout.trim()).not.toBe((await again.exec({}, 'echo "$HOME"')).stdout.trim());
    const kept = await again.exec({}, `test -e ${eph.stdout.trim()} && echo still-there || echo removed`);
    expect(kept.stdout).toBe('still-there\n');
  });

  it('explain names the host without contacting it', async () => {
    const broker = await open({ ssh: { ...sshConfigSection(), host: 'build1.invalid', port: 2200 } });
    const b = broker.explain({ session: 'e' });
    expect(b).toMatchObject({ backend: 'ssh', isolation: 'remote', host: 'root@build1.invalid:2200' });
    expect(b.note).toContain('its own unprivileged account');
  });
});
