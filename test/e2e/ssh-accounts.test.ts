import { randomBytes } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { accountName } from '../../src/backends/ssh/account-name.js';
import { RemoteAccounts } from '../../src/backends/ssh/accounts.js';
import { SshConnectionPool } from '../../src/backends/ssh/connections.js';
import { RemoteHostError } from '../../src/backends/ssh/errors.js';
import { remoteRunner, type RemoteRunner } from '../../src/backends/ssh/remote-exec.js';
import { BerthError } from '../../src/errors.js';
import { describeSsh, SshFixture } from '../helpers/sshd.js';

let fx: SshFixture | undefined;
afterEach(async () => {
  await fx?.cleanup();
  fx = undefined;
}, 120_000);

function fixture(): SshFixture {
  fx = new SshFixture();
  return fx;
}

function root(f: SshFixture): RemoteRunner {
  return remoteRunner(f.pool, f.target);
}

async function uidProcesses(f: SshFixture, uid: number): Promise<number> {
  const r = await root(f)(
    'u=$1 n=0; for d in /proc/[0-9]*; do { read -r l < "$d/stat"; r=${l##*) }; [ "${r%% *}" = Z ] && continue; ' +
      'while read -r k v _; do [ "$k" = Uid: ] && { [ "$v" = "$u" ] && n=$((n+1)); break; }; done < "$d/status"; } 2>/dev/null; done; echo $n',
    [String(uid)],
  );
  return Number(r.stdout.trim());
}

describeSsh('per-sandbox accounts on the SSH host (real sshd, root login)', () => {
  it('accepts a root login with the tools it needs', async () => {
    const f = fixture();
    const probe = await f.accounts.check();
    expect(probe.uid).toBe(0);
    expect(probe.missing).toEqual([]);
  });

  it('refuses a login user that is not root, at check time, with what to do', async () => {
    const f = fixture();
    const user = `berthnr${randomBytes(4).toString('hex')}`;
    const r = root(f);
    await r('useradd --no-create-home --home-dir / --shell /bin/bash -- "$1" && usermod -p "*" -- "$1"', [user]);
    try {
      const target = { ...f.target, user };
      // Its own pool: the user cannot be deleted while its connection (an sshd process of it) is open.
      await using pool = new SshConnectionPool();
      const accounts = new RemoteAccounts(remoteRunner(pool, target), { endpoint: `${target.host}:${target.port}`, user });
      const err = await accounts.check().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RemoteHostError);
      expect((err as Error).message).toMatch(new RegExp(`"${user}" is uid [1-9][0-9]* there`));
      expect((err as Error).message).toContain('set ssh.user to root');
    } finally {
      const del = await r('for i in $(seq 50); do userdel -- "$1" 2>/dev/null; s=$?; [ $s = 8 ] || break; sleep 0.1; done; echo $s', [user]);
      expect(del.stdout.trim()).toBe('0');
    }
  });

  it('creates an account idempotently: same uid, home 0700 owned by it under a 0711 root-owned root', async () => {
    const f = fixture();
    const a = await f.account();
    const again = await f.accounts.ensure({ name: a.name, installation: f.installation, digest: `${a.name.slice(6)}${'0'.repeat(40)}`, ephemeral: true });
    // The first ensure made the account; the second adopted it.
    expect(a.created).toBe(true);
    expect(again).toEqual({ ...a, created: false });
    const st = await root(f)('stat -c "%n %u %a" -- "$1" "$1/$2" "$1/$2/workspace" "$1/$2/tmp" "$1/$2/.berth"', [f.accounts.homeRoot, a.name]);
    expect(st.stdout.trim().split('\n')).toEqual([
      `${f.accounts.homeRoot} 0 711`,
      `${a.home} ${a.uid} 700`,
      `${a.workspace} ${a.uid} 700`,
      `${a.tmp} ${a.uid} 700`,
      `${a.stateDir} ${a.uid} 700`,
    ]);
    expect(a.uid).toBeGreaterThan(0);
  });

  it('never adopts an account another installation recorded', async () => {
    const f = fixture();
    const a = await f.account();
    const err = await f.accounts.ensure({ name: a.name, installation: 'someone-else', digest: 'ab', ephemeral: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as Error).message).toContain('belongs to another berth installation');
  });

  it('does not follow a link the account planted in its home when the account is ensured again', async () => {
    const f = fixture();
    const a = await f.account();
    const before = await root(f)('stat -c "%u %g %a" /etc /etc/shadow', []);
    expect((await f.runAs(a, 'cd ~ && rm -rf workspace tmp && ln -s /etc workspace && ln -s /etc/shadow tmp && echo planted')).out).toContain('planted');
    await f.accounts.ensure({ name: a.name, installation: f.installation, digest: 'ab', ephemeral: true }).catch(() => undefined);
    expect((await root(f)('stat -c "%u %g %a" /etc /etc/shadow', [])).stdout).toBe(before.stdout);
  });

  it('keeps sandboxes apart: A cannot read B\'s files or its processes\' environment, signal them, read /etc/shadow, or hold any privilege', async () => {
    const f = fixture();
    const a = await f.account();
    const b = await f.account();
    const secret = `b-secret-${randomBytes(8).toString('hex')}`;
    const bProc = await f.startAs(b, 'echo private > ~/workspace/notes; echo private > ~/secret-home-file; chmod 644 ~/workspace/notes; echo ready; exec sleep 300', { B_TOKEN: secret });
    const checks = [
      `cat ${b.workspace}/notes`,
      `cat ${b.home}/secret-home-file`,
      `ls ${b.home}`,
      `touch ${b.workspace}/from-a`,
      // B's pids mean nothing in A's PID namespace: A looks for any process of B's uid it could name.
      'grep -a B_TOKEN /proc/[0-9]*/environ',
      `for d in /proc/[0-9]*; do [ "$(stat -c %u "$d" 2>/dev/null)" = ${b.uid} ] && kill -0 "\${d#/proc/}" && exit 0; done; exit 1`,
      'cat /etc/shadow',
      `ls ${f.accounts.homeRoot}`,
    ];
    for (const cmd of checks) {
      const r = await f.runAs(a, `${cmd} && echo ALLOWED`);
      expect({ cmd, allowed: r.out.includes('ALLOWED') || r.out.includes(secret) || r.out.includes('private') }).toEqual({ cmd, allowed: false });
      expect(r.code).not.toBe(0);
    }
    const self = await f.runAs(a, 'id -u; grep -E "^(CapEff|CapPrm|CapAmb|NoNewPrivs):" /proc/self/status');
    const [uid, ...status] = self.out.trim().split('\n');
    expect(Number(uid)).toBe(a.uid);
    expect(Number(uid)).not.toBe(0);
    expect(status.map((l) => l.replace(/\s+/g, ' '))).toEqual(['CapPrm: 0000000000000000', 'CapEff: 0000000000000000', 'CapAmb: 0000000000000000', 'NoNewPrivs: 1']);
    await bProc.kill();
  });

  it('removes an account with every process (setsid, emptied env, double fork), its home, its temp files, the user and its record', async () => {
    const f = fixture();
    const a = await f.account();
    const p = await f.startAs(a, 'echo x > /tmp/berth-test-$USER; (setsid env -i sleep 1000 &); (sleep 1001 &); echo ready; exec sleep 1002');
    expect(await uidProcesses(f, a.uid)).toBeGreaterThanOrEqual(3);
    expect((await f.accounts.list(f.installation)).map((r) => [r.name, r.exists, r.processes >= 3])).toEqual([[a.name, true, true]]);
    const removed = await f.accounts.remove(a.name);
    expect(removed.killed).toBeGreaterThanOrEqual(3);
    await p.exited;
    expect(await uidProcesses(f, a.uid)).toBe(0);
    const left = await root(f)('getent passwd "$1"; ls -d "$2" "/tmp/berth-test-$1" /var/lib/berth/accounts/"$1" 2>/dev/null; true', [a.name, a.home]);
    expect(left.stdout).toBe('');
    expect(await f.accounts.list(f.installation)).toEqual([]);
    expect(await f.accounts.remove(a.name)).toEqual({ killed: 0 });
  });

  it('stops a sandbox: every process of the account ends, its account and files stay and it runs again', async () => {
    const f = fixture();
    const a = await f.account(false);
    const p = await f.startAs(a, 'echo kept > ~/workspace/file; (setsid env -i sleep 1000 &); echo ready; exec sleep 1001');
    expect((await f.accounts.stop(a.name)).killed).toBeGreaterThanOrEqual(2);
    await p.exited;
    expect(await uidProcesses(f, a.uid)).toBe(0);
    expect((await f.runAs(a, 'cat ~/workspace/file')).out).toBe('kept\n');
  });

  it('lists only this installation\'s accounts', async () => {
    const f = fixture();
    const a = await f.account(true);
    const other = new SshFixture();
    try {
      const b = await other.account(false);
      expect((await f.accounts.list(f.installation)).map((r) => r.name)).toEqual([a.name]);
      expect(await other.accounts.list(other.installation)).toEqual([
        { name: b.name, digest: expect.stringMatching(/^[0-9a-f]{64}$/), ephemeral: false, exists: true, processes: 0, up: true, home: b.home },
      ]);
      expect(accountName((await other.accounts.list(other.installation))[0]!.digest)).toBe(b.name);
    } finally {
      await other.cleanup();
    }
  });
});
