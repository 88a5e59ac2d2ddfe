import { randomBytes, randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import { afterEach, expect, it } from 'vitest';
import type { RemoteAccount } from '../../src/backends/ssh/accounts.js';
import { SshConnectionPool } from '../../src/backends/ssh/connections.js';
import { NS_DIR } from '../../src/backends/ssh/namespaces.js';
import { SANDBOX_UID_MAX, SANDBOX_UID_MIN, UID_DIR } from '../../src/backends/ssh/uid-range.js';
import { waitFor } from '../helpers/docker-e2e.js';
import { describeSsh, SshFixture } from '../helpers/sshd.js';

/*
 * What one SSH sandbox can reach of another on the same host, and of one removed before it: its
 * own PID, IPC and mount namespaces (private /proc and temp dirs), and uids never handed out
 * twice. The IPC objects are made with python3's ctypes (the host here has it: util-linux's
 * ipcmk makes SysV objects but writes nothing into them, and nothing makes a POSIX queue).
 */

const fixtures: SshFixture[] = [];
afterEach(async () => {
  for (const f of fixtures.splice(0)) await f.cleanup();
}, 120_000);

/** A fixture of its own installation: another tenant of the host. */
function tenant(): SshFixture {
  const f = new SshFixture();
  fixtures.push(f);
  return f;
}

const PY_IPC = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
key, name = int(os.environ['KEY']), os.environ['MQ'].encode()
err = lambda: os.strerror(ctypes.get_errno())
`;

/** Leaves a 0600 SysV segment and a 0600 POSIX queue holding SECRET; prints `made`. */
const PY_LEAVE = `${PY_IPC}
secret = os.environ['SECRET'].encode()
shm = libc.shmget(key, 4096, 0o1600)
assert shm >= 0, 'shmget: ' + err()
addr = libc.shmat(shm, None, 0)
ctypes.memmove(addr, secret, len(secret))
q = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None)
assert q >= 0, 'mq_open: ' + err()
assert libc.mq_send(q, secret, len(secret), 0) == 0, 'mq_send: ' + err()
print('made')
`;

/** Tries to read the segment and the queue; prints what it got or the error, one line each. */
const PY_READ = `${PY_IPC}
shm = libc.shmget(key, 0, 0)
if shm < 0:
    print('shm: ' + err())
else:
    addr = libc.shmat(shm, None, 0o10000)
    print('shm: ' + (err() if addr in (None, 2**64 - 1) else 'read ' + ctypes.string_at(addr, 64).rstrip(b'\\0').decode('latin1')))
q = libc.mq_open(name, os.O_RDONLY | os.O_NONBLOCK)
if q < 0:
    print('mq: ' + err())
else:
    buf = ctypes.create_string_buffer(1 << 16)
    n = libc.mq_receive(q, buf, len(buf), None)
    print('mq: ' + (err() if n < 0 else 'read ' + buf.raw[:n].decode('latin1')))
`;

function python(code: string): string {
  return `exec python3 -c '${code.replace(/'/g, `'\\''`)}'`;
}

/** Live processes of a uid on the host (zombies excluded). */
async function processesOf(f: SshFixture, uid: number): Promise<number> {
  const r = await f.root('ps -u "$1" -o stat= | grep -vc "^Z"; true', [String(uid)]);
  return Number(r.stdout.trim());
}

/** The host pid of the sandbox's namespace holder, from its record (undefined: none recorded). */
async function holderOf(f: SshFixture, acct: RemoteAccount): Promise<number | undefined> {
  const r = await f.root('read -r p _ < "$1/$2" 2>/dev/null && echo "$p"; true', [NS_DIR, acct.name]);
  return r.stdout.trim() === '' ? undefined : Number(r.stdout.trim());
}

async function alive(f: SshFixture, pid: number): Promise<boolean> {
  return (await f.root('kill -0 "$1" 2>/dev/null && echo yes || echo no', [String(pid)])).stdout.trim() === 'yes';
}

describeSsh('SSH sandboxes are as private as containers (real sshd)', () => {
  it('a removed sandbox leaves the next one nothing: a new uid, and none of its /run/lock file, SysV segment or POSIX queue', async () => {
    if (!existsSync('/usr/bin/python3')) throw new Error('this test needs python3 on the test host (/usr/bin/python3) to make IPC objects');
    const first = tenant();
    const a = await first.account();
    const secret = `a-secret-${randomBytes(8).toString('hex')}`;
    const env = { KEY: String(randomInt(1, 2 ** 30)), MQ: `/berth-test-${randomBytes(6).toString('hex')}`, SECRET: secret };
    const lock = `/run/lock/berth-test-${randomBytes(6).toString('hex')}`;
    const left = await first.runAs(a, `umask 077; echo ${secret} > ${lock} && ${python(PY_LEAVE)}`, env);
    expect(left).toEqual({ out: 'made\n', code: 0 });
    // A reads its own things back: they are there to be found.
    expect((await first.runAs(a, `cat ${lock}; ${python(PY_READ)}`, env)).out).toBe(`${secret}\nshm: read ${secret}\nmq: read ${secret}\n`);
    await first.accounts.remove(a.name);

    const second = tenant();
    const b = await second.account();
    expect(b.uid).not.toBe(a.uid);
    expect(b.uid).toBeGreaterThan(a.uid);
    const r = await second.runAs(b, `cat ${lock} 2>&1; ${python(PY_READ)}`, env);
    expect(r.out).not.toContain(secret);
    expect(r.out).toBe(`cat: ${lock}: No such file or directory\nshm: No such file or directory\nmq: No such file or directory\n`);
    // Nothing of A's uid is left on the host either.
    const host = await second.root('find /tmp /var/tmp /dev/shm /run/lock -xdev -uid "$1" 2>/dev/null; awk -v u="$1" \'$8 == u || $10 == u\' /proc/sysvipc/shm', [String(a.uid)]);
    expect(host.stdout).toBe('');
  });

  it('removal still cleans what a uid left outside its namespaces: temp files, /run/lock, SysV segments, semaphores and queues, POSIX queues', async () => {
    const f = tenant();
    const a = await f.account();
    const mq = `/berth-test-${randomBytes(6).toString('hex')}`;
    // As an account of an earlier berth would have: straight on the host, as its uid.
    const made = await f.root(
      'as() { setpriv --reuid="$1" --regid="$2" --clear-groups -- "${@:3}"; }; ' +
        'for d in /tmp /var/tmp /dev/shm /run/lock; do as "$1" "$2" touch "$d/berth-left-$1" || exit 1; done; ' +
        'as "$1" "$2" ipcmk -M 4096 -p 0600 && as "$1" "$2" ipcmk -S 1 -p 0600 && as "$1" "$2" ipcmk -Q -p 0600 || exit 1; ' +
        'MQ=$3 as "$1" "$2" python3 -c \'import ctypes, os; assert ctypes.CDLL(None).mq_open(os.environ["MQ"].encode(), os.O_CREAT | os.O_RDWR, 0o600, None) >= 0\' || exit 1; ' +
        'echo made',
      [String(a.uid), String(a.gid), mq],
    );
    expect(made.stdout, made.stderr).toContain('made');
    await f.accounts.remove(a.name);
    const left = await f.root(
      'find /tmp /var/tmp /dev/shm /run/lock -xdev -uid "$1" 2>/dev/null; ' +
        'for k in shm sem msg; do awk -v u="$1" -v k=$k \'NR > 1 && (k == "sem" ? ($5 == u || $7 == u) : ($8 == u || $10 == u)) { print k, $2 }\' /proc/sysvipc/$k; done; ' +
        'MQ=$2 python3 -c \'import ctypes, os; print("mq left") if ctypes.CDLL(None).mq_open(os.environ["MQ"].encode(), os.O_RDONLY, 0, None) >= 0 else None\'',
      [String(a.uid), mq],
    );
    expect(left.stdout, left.stderr).toBe('');
  });

  it('one sandbox cannot see another\'s processes or their command lines (ps, /proc), nor its /tmp, /var/tmp, /dev/shm or /run/lock', async () => {
    const f = tenant();
    const a = await f.account();
    const b = await f.account();
    const marker = `${randomInt(1000, 9999)}.25`;
    const files = ['/tmp', '/var/tmp', '/dev/shm', '/run/lock'].map((d) => `${d}/b-file-${marker}`);
    const bProc = await f.startAs(b, `for x in ${files.join(' ')}; do echo b-private > $x && chmod 644 $x; done; echo ready; exec sleep ${marker}`);
    try {
      const r = await f.runAs(a, `ps -eo uid=,args=; echo --; ls /proc | grep -c '^[0-9]'; echo --; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo --; cat ${files.join(' ')} 2>&1; true`);
      const [ps = '', , cmdlines = '', cats = ''] = r.out.split('--\n');
      expect(r.out).not.toContain(`sleep ${marker}`);
      expect(r.out).not.toContain('b-private');
      // All A sees: its own processes and its holder's two (root's).
      const uids = new Set(ps.trim().split('\n').map((l) => l.trim().split(/\s+/)[0]));
      expect([...uids].sort()).toEqual(['0', String(a.uid)].sort());
      expect(cmdlines).not.toContain(b.name);
      expect(cats.trim().split('\n')).toEqual(files.map((x) => `cat: ${x}: No such file or directory`));
      // B sees its own, in the same places.
      expect((await f.runAs(b, `cat ${files.join(' ')}; ps -eo args= | grep -c "^sleep ${marker}"`)).out).toBe('b-private\n'.repeat(4) + '1\n');
    } finally {
      await bProc.kill();
    }
  });

  it('every spawn of a sandbox, on any connection (a berth restarted), shares one set of namespaces; another sandbox has its own', async () => {
    const f = tenant();
    const a = await f.account();
    const b = await f.account();
    const ns = 'readlink /proc/self/ns/pid /proc/self/ns/ipc /proc/self/ns/mnt';
    // Spawns racing to make the namespaces of a new sandbox make one set (the account's lock).
    const racing = await Promise.all(Array.from({ length: 4 }, () => f.runAs(a, ns)));
    expect(new Set(racing.map((r) => r.out)).size).toBe(1);
    const first = await f.startAs(a, `echo kept > /tmp/a-file; ${ns}; echo ready; exec sleep 3301.5`);
    try {
      // A second berth: its own connections, nothing of the first one's state.
      await using pool = new SshConnectionPool();
      const other = await f.runAs(a, `${ns}; cat /tmp/a-file; ps -eo args= | grep -c "^sleep 3301.5"`, {}, { ...f.spawnContext, pool });
      const links = other.out.split('\n').slice(0, 3);
      expect(links.every((l) => /^(pid|ipc|mnt):\[[0-9]+\]$/.test(l))).toBe(true);
      expect(other.out.split('\n').slice(3)).toEqual(['kept', '1', '']);
      const host = await f.root(`${ns.replace(/self/g, '1')}`);
      const theirs = (await f.runAs(b, ns)).out.split('\n').slice(0, 3);
      for (let i = 0; i < 3; i++) {
        expect(theirs[i]).not.toBe(links[i]);
        expect(host.stdout.split('\n')[i]).not.toBe(links[i]);
      }
    } finally {
      await first.kill();
    }
  });

  it('a holder that died is made again by the next spawn with empty temp dirs (the home kept); stop ends it and every process in it', async () => {
    const f = tenant();
    const a = await f.account(false);
    const p = await f.startAs(a, 'echo gone-with-it > /tmp/t; echo kept > ~/h; (setsid env -i sleep 3401.5 &); echo ready; exec sleep 3402.5');
    const holder = await holderOf(f, a);
    expect(holder).toBeGreaterThan(1);
    await f.root('kill -KILL "$1"', [String(holder)]);
    // The kernel ends every process of the namespace with its pid 1, escapees too.
    expect((await p.exited).signal).toBe('SIGKILL');
    expect(await waitFor(async () => (await processesOf(f, a.uid)) === 0, 10_000)).toBe(true);
    expect((await f.runAs(a, 'cat /tmp/t 2>&1; cat ~/h')).out).toBe('cat: /tmp/t: No such file or directory\nkept\n');
    const again = await holderOf(f, a);
    expect(again).not.toBe(holder);
    expect(await alive(f, again!)).toBe(true);

    const q = await f.startAs(a, '(setsid env -i sleep 3403.5 &); echo ready; exec sleep 3404.5');
    expect((await f.accounts.stop(a.name)).killed).toBeGreaterThanOrEqual(2);
    expect((await q.exited).signal).toBe('SIGKILL');
    expect(await alive(f, again!)).toBe(false);
    expect(await holderOf(f, a)).toBeUndefined();
    expect(await processesOf(f, a.uid)).toBe(0);
  });

  it('a sandbox cannot end its holder, reach its record or leave its namespaces, and its temp dirs are bounded', async () => {
    const f = tenant();
    const a = await f.account();
    const r = await f.runAs(a, [
      'kill -KILL 1 2 2>/dev/null && echo killed-holder',
      `ls ${NS_DIR} 2>/dev/null && echo listed-records`,
      `cat ${NS_DIR}/$USER 2>/dev/null && echo read-record`,
      `flock -n ${NS_DIR}/$USER.lock true 2>/dev/null && echo took-lock`,
      // The command holds nothing of the launcher: no namespace fd, no lock, no FIFO.
      `ls -l /proc/$$/fd | grep -E "(pid|mnt|ipc):\\[|${NS_DIR}" && echo launcher-fds`,
      'nsenter -t 1 -m -p true 2>/dev/null && echo entered',
      'unshare -m -p -f true 2>/dev/null && echo unshared-as-root',
      'head -c 12M /dev/zero > /tmp/big 2>/dev/null && echo tmp-unbounded',
      'head -c 12M /dev/zero > /dev/shm/big 2>/dev/null && echo shm-unbounded',
      'df -m --output=size /tmp /var/tmp /dev/shm /run/lock | tail -n +2 | tr -s " \\n" " "',
    ].join('; '), {}, { ...f.spawnContext, tmpSizeMb: 8 });
    expect(r.out).toBe(' 8 8 8 8 ');
    expect(await alive(f, (await holderOf(f, a))!)).toBe(true);
  });

  it('concurrent creators on one host (two berths) get distinct uids from berth\'s range, above every earlier one', async () => {
    const one = tenant();
    const two = tenant();
    const mark = Number((await one.root('cat "$1/high-water" 2>/dev/null || echo 0', [UID_DIR])).stdout.trim());
    const made = await Promise.all([...Array.from({ length: 4 }, () => one.account()), ...Array.from({ length: 4 }, () => two.account())]);
    const uids = made.map((m) => m.uid);
    expect(new Set(uids).size).toBe(8);
    for (const m of made) {
      expect(m.uid).toBeGreaterThan(mark);
      expect(m.uid).toBeGreaterThanOrEqual(SANDBOX_UID_MIN);
      expect(m.uid).toBeLessThanOrEqual(SANDBOX_UID_MAX);
      expect(m.gid).toBe(m.uid);
    }
    const after = Number((await one.root('cat "$1/high-water"', [UID_DIR])).stdout.trim());
    expect(after).toBeGreaterThanOrEqual(Math.max(...uids));
    // Root's alone: a sandbox holding the lock would stall every creation on the host.
    expect((await one.root('stat -c "%u %a" "$1" "$1/high-water" "$1/lock"', [UID_DIR])).stdout).toBe('0 700\n0 600\n0 600\n');
    const probe = await one.runAs(made[0]!, `ls ${UID_DIR} 2>/dev/null && echo listed; flock -n ${UID_DIR}/lock true 2>/dev/null && echo locked; true`);
    expect(probe.out).toBe('');
  });
});
