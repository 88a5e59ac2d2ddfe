import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it, onTestFinished } from 'vitest';
import { describeBwrap, hostUidOf, IS_ROOT, PATH_ENV, sh, tempRoot, testRange, testSandbox } from '../helpers/bwrap.js';

/*
 * What a hostile command inside a bwrap sandbox must not reach: host secrets, berth's state,
 * another sandbox, host processes; and what it must not be able to do: capabilities, new user
 * namespaces, mount, ptrace, keyrings, TIOCSTI and the rest of the syscall filter. Each syscall
 * is also tried in a sandbox without the filter (the operator's explicit opt-out), to show the
 * refusal comes from the filter where the kernel alone would allow the call.
 */

const range = testRange();

/** Syscall numbers the perl probe uses (they differ per architecture). */
const NR: Record<string, Record<string, number>> = {
  x64: { unshare: 272, mount: 165, ptrace: 101, keyctl: 250, add_key: 248, request_key: 249, bpf: 321, perf_event_open: 298, userfaultfd: 323, personality: 135, init_module: 175, kexec_load: 246, clone3: 435, setns: 308, pivot_root: 155, process_vm_readv: 310 },
  arm64: { unshare: 97, mount: 40, ptrace: 117, keyctl: 219, add_key: 217, request_key: 218, bpf: 280, perf_event_open: 241, userfaultfd: 282, personality: 92, init_module: 105, kexec_load: 104, clone3: 435, setns: 268, pivot_root: 41, process_vm_readv: 270 },
};

/** A perl program that tries each call and prints `name ok` or `name <errno>`. Read from stdin: nothing on argv. */
function syscallProbe(nr: Record<string, number>): string {
  return `
use strict; use POSIX ();
$| = 1;
sub report { my ($name, $r) = @_; print "$name ", ($r == -1 ? ($!+0) : 'ok'), "\\n"; }
report('unshare', syscall(${nr['unshare']}, 0x10000000));
report('setns', syscall(${nr['setns']}, 0, 0));
mkdir '/tmp/m';
# perl's syscall() wants variables for string arguments (it may write through them).
my ($none, $dir, $fs, $tmp, $user, $k, $v) = ('none', '/tmp/m', 'tmpfs', '/tmp', 'user', 'k', 'v');
report('mount', syscall(${nr['mount']}, $none, $dir, $fs, 0, 0));
report('pivot_root', syscall(${nr['pivot_root']}, $tmp, $dir));
my $child = fork();
if ($child == 0) { sleep 30; exit 0; }
report('ptrace', syscall(${nr['ptrace']}, 16, $child, 0, 0));
my $buf = "\\0" x 8; my $iov = pack('P8Q', $buf, 8);
report('process_vm_readv', syscall(${nr['process_vm_readv']}, $child, $iov, 1, $iov, 1, 0));
kill 'KILL', $child; waitpid($child, 0);
report('keyctl', syscall(${nr['keyctl']}, 0, -3, 1));
report('add_key', syscall(${nr['add_key']}, $user, $k, $v, 1, -3));
report('request_key', syscall(${nr['request_key']}, $user, $k, 0, 0));
report('bpf', syscall(${nr['bpf']}, 0, 0, 0));
report('perf_event_open', syscall(${nr['perf_event_open']}, 0, 0, -1, -1, 0));
report('userfaultfd', syscall(${nr['userfaultfd']}, 1));
report('personality', syscall(${nr['personality']}, 0x0008));
report('init_module', syscall(${nr['init_module']}, 0, 0, $k));
report('kexec_load', syscall(${nr['kexec_load']}, 0, 0, 0, 0));
report('clone3', syscall(${nr['clone3']}, 0, 0));
# TIOCSTI needs a controlling terminal: a new session that opens a fresh pty slave.
pipe(my $r, my $w);
my $tty = fork();
if ($tty == 0) {
  close $r; POSIX::setsid();
  # Report and leave before the pty closes: closing its master hangs up the session (SIGHUP).
  sub tell_parent { print $w "tiocsti $_[0]\\n"; close $w; POSIX::_exit(0); }
  open(my $m, '+<', '/dev/ptmx') or tell_parent('noptmx');
  my $z = pack('i', 0); ioctl($m, 0x40045431, $z);
  my $n = pack('i', 0); ioctl($m, 0x80045430, $n);
  open(my $s, '+<', '/dev/pts/' . unpack('i', $n)) or tell_parent('nopts');
  my $c = 'x';
  tell_parent(ioctl($s, 0x5412, $c) ? 'ok' : ($!+0));
}
close $w; print scalar(<$r>); waitpid($tty, 0);
`;
}

function results(out: string): Record<string, string> {
  return Object.fromEntries(out.trim().split('\n').map((l) => l.split(' ') as [string, string]));
}

const EPERM = '1';
const ENOSYS = '38';

describeBwrap('bwrap isolation: what a sandboxed command cannot reach or do', (host) => {
  it('cannot read host secrets or berth\'s state, and sees none of the host\'s own dirs', async () => {
    const berthHome = mkdtempSync(join(tmpdir(), 'berth-home-'));
    onTestFinished(() => rmSync(berthHome, { recursive: true, force: true }));
    chmodSync(berthHome, 0o700);
    writeFileSync(join(berthHome, 'state.db'), 'berth-state-secret');
    const { sb } = await testSandbox(host, tempRoot(), range, 'a');
    const r = await sh(sb, `cat /etc/shadow; echo "shadow=$?"; cat ${berthHome}/state.db; echo "home=$?"; ls -A / | tr "\\n" " "`);
    expect(r.stdout).toContain('shadow=1');
    expect(r.stdout).toContain('home=1');
    expect(r.stdout).not.toContain('berth-state-secret');
    // Not even there: the sandbox's /etc is built, not the host's (see the /etc test below).
    expect(r.stderr).toMatch(/\/etc\/shadow: No such file or directory/);
    const top = r.stdout.trim().split('\n').pop()!.trim().split(' ');
    expect(top.filter((d) => !['bin', 'dev', 'etc', 'home', 'lib', 'lib32', 'lib64', 'libx32', 'proc', 'run', 'sbin', 'tmp', 'usr', 'var', 'workspace'].includes(d))).toEqual([]);
    expect((await sh(sb, 'ls -A /home /run /var | tr "\\n" " "')).stdout).toBe('/home: sandbox  /run: berth  /var: tmp ');
  });

  it('sees a minimal /etc: a world-readable file planted in the host\'s /etc is not there; accounts, hosts and certificates still work', async () => {
    const planted = join('/etc', `berth-planted-${randomBytes(6).toString('hex')}`);
    writeFileSync(planted, 'host-etc-token-value\n', { mode: 0o644 });
    chmodSync(planted, 0o644);
    onTestFinished(() => rmSync(planted, { force: true }));
    const { sb } = await testSandbox(host, tempRoot(), range, 'a');
    const r = await sh(sb, [
      `cat ${planted} 2>/dev/null; echo "planted=$?"`,
      'grep -rs host-etc-token-value /etc; echo "grep=$?"',
      'ls -A /etc | tr "\\n" " "; echo',
      'id -un; getent hosts berth-test | tr -s " \\t" " "; grep -c . /etc/hosts',
      'test -s /etc/ssl/certs/ca-certificates.crt && echo certs',
      'test -e /etc/resolv.conf || echo no-resolv',
    ].join('; '));
    const [planted$, grep, listing, user, ...rest] = r.stdout.split('\n');
    expect(planted$, r.stderr).toBe('planted=1');
    expect(grep).toBe('grep=1');
    const hostOnly = ['hostname', 'machine-id', 'shadow', 'gshadow', 'fstab', 'environment', 'gitconfig', 'sudoers', 'ssh', 'apt', 'docker'];
    expect(listing!.trim().split(' ').filter((e) => hostOnly.includes(e) || e.startsWith('berth-planted'))).toEqual([]);
    for (const generated of ['passwd', 'group', 'hosts', 'nsswitch.conf']) expect(listing!.split(' ')).toContain(generated);
    expect(user).toBe('sandbox');
    expect(rest.slice(0, 4)).toEqual(['127.0.1.1 berth-test', '3', 'certs', 'no-resolv']);
  });

  it('git, curl and python run with the minimal /etc (python finds the CA certificates); the host network\'s resolv.conf is there', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 'a', { network: 'host' });
    const have = (tool: string): boolean => existsSync(`/usr/bin/${tool}`);
    const r = await sh(sb, [
      'test -s /etc/resolv.conf && echo resolv',
      have('git') ? 'cd /tmp && git init -q r && git -C r -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git -C r log --format=%s' : 'echo x',
      have('curl') ? 'curl -sS -o /dev/null --max-time 5 file:///etc/hosts && echo curl' : 'echo curl',
      have('python3') ? '/usr/bin/python3 -c "import ssl, json; print(ssl.create_default_context().cert_store_stats()[\'x509_ca\'] > 0)"' : 'echo True',
    ].join('; '));
    expect(r.stdout, r.stderr).toBe('resolv\nx\ncurl\nTrue\n');
  });

  it("cannot see a host process or read its environment", async () => {
    const hostProc = spawn('sleep', ['60'], { env: { HOST_ONLY_SECRET: 'host-secret-value-42' }, stdio: 'ignore' });
    onTestFinished(() => {
      hostProc.kill('SIGKILL');
    });
    const { sb } = await testSandbox(host, tempRoot(), range, 'a');
    const r = await sh(sb, `cat /proc/${hostProc.pid}/environ; echo "direct=$?"; grep -l -s host-secret-value /proc/[0-9]*/environ; ls /proc | grep -c '^[0-9]'`);
    expect(r.stdout).toContain('direct=1');
    expect(r.stdout).not.toContain('environ');
    expect(Number(r.stdout.trim().split('\n').pop())).toBeLessThan(12);
  });

  it('cannot reach another sandbox: not its files, not its processes; on the host their dirs are another uid\'s', async () => {
    const root = tempRoot();
    const a = await testSandbox(host, root, range, 'a');
    const b = await testSandbox(host, root, range, 'b');
    // Returns once the marker has exec'd (its fork returns first, showing bash until then), so A looks for a process that is there.
    await sh(b.sb, 'echo b-private > /workspace/secret; echo b-tmp > /tmp/t; (exec -a b-marker sleep 60 >/dev/null 2>&1 &); ' +
      "for i in $(seq 500); do ps -eo args= | grep -q '^[b]-marker' && break; sleep 0.02; done");
    const r = await sh(
      a.sb,
      `cat ${b.placement.dirs.workspace}/secret; echo "path=$?"; cat /tmp/t; echo "tmp=$?"; ps -eo args= | grep -c '^[b]-marker'; ls /workspace | wc -l`,
    );
    expect(r.stdout).not.toContain('b-private');
    expect(r.stdout).not.toContain('b-tmp');
    expect(r.stdout).toContain('path=1');
    expect(r.stdout).toContain('tmp=1');
    expect(r.stdout.trim().split('\n').slice(-2)).toEqual(['0', '0']);
    // The marker process is there, for B.
    expect((await sh(b.sb, "ps -eo args= | grep -c '^[b]-marker'")).stdout.trim()).toBe('1');
    if (IS_ROOT) {
      const uidA = hostUidOf(a.sb.hostPid);
      const uidB = hostUidOf(b.sb.hostPid);
      expect(uidA).not.toBe(uidB);
      // Were A ever out of its mount namespace, B's dirs would still be another uid's 0700 dirs.
      const code = await new Promise<number | null>((resolve) => {
        const c = spawn('cat', [join(b.placement.dirs.workspace, 'secret')], { uid: uidA, gid: uidA, stdio: 'ignore' });
        c.on('exit', (x) => resolve(x));
      });
      expect(code).toBe(1);
    }
  });

  it('holds no capability in any of its processes, not even in its own user namespace', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 'a');
    const r = await sh(sb, 'grep -h -E "^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):" /proc/[0-9]*/status | sort | uniq -c');
    const lines = r.stdout.trim().split('\n').map((l) => l.trim().replace(/^\d+\s+/, ''));
    expect(lines.sort()).toEqual(['CapAmb:\t0000000000000000', 'CapBnd:\t0000000000000000', 'CapEff:\t0000000000000000', 'CapPrm:\t0000000000000000', 'NoNewPrivs:\t1', 'Seccomp:\t2']);
  });

  it('refuses new user namespaces, mount, ptrace, keyrings, TIOCSTI and the rest of the filter', async () => {
    const nr = NR[process.arch];
    if (nr === undefined || !existsSync('/usr/bin/perl')) {
      throw new Error(`this test needs /usr/bin/perl and syscall numbers for ${process.arch}`);
    }
    const root = tempRoot();
    const filtered = await testSandbox(host, root, range, 'filtered');
    const open = await testSandbox(host, root, range, 'unfiltered', { seccomp: undefined });
    const withFilter = results((await sh(filtered.sb, 'perl -', PATH_ENV, syscallProbe(nr))).stdout);
    const without = results((await sh(open.sb, 'perl -', PATH_ENV, syscallProbe(nr))).stdout);
    for (const name of ['unshare', 'setns', 'mount', 'pivot_root', 'ptrace', 'process_vm_readv', 'keyctl', 'add_key', 'request_key', 'bpf', 'perf_event_open', 'userfaultfd', 'personality', 'init_module', 'kexec_load', 'tiocsti']) {
      expect(withFilter[name], name).toBe(EPERM);
    }
    expect(withFilter['clone3']).toBe(ENOSYS);
    // Without the filter the kernel lets these through (or refuses them differently): the filter is what refuses them.
    expect(without['keyctl']).toBe('ok');
    expect(without['ptrace']).toBe('ok');
    expect(without['personality']).toBe('ok');
    expect(without['tiocsti']).toBe('ok');
    // ENOSPC: the user-namespace limit bwrap's --disable-userns set; the filter answers first, with EPERM.
    expect(without['unshare']).toBe('28');
  });

  it('never has a secret on any argv, inside or on the host, while a process holds it in its env', async () => {
    const secret = 'sk-test-9f8e7d6c5b4a39281706';
    const { sb } = await testSandbox(host, tempRoot(), range, 'a');
    const holder = await sb.spawn(['/bin/bash', '-c', 'exec sleep 60'], { env: { ...PATH_ENV, API_TOKEN: secret }, stdin: false });
    onTestFinished(() => holder.kill());
    // Every argv in the sandbox, printed: the secret must be in none of them (the check itself names no secret).
    const argvs = await sh(sb, 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < $f; echo; done');
    expect(argvs.stdout).toContain('sleep 60');
    expect(argvs.stdout).not.toContain(secret);
    const envs = await sh(sb, 'for f in /proc/[0-9]*/environ; do tr "\\0" "\\n" < $f 2>/dev/null; done');
    expect(envs.stdout).toContain(`API_TOKEN=${secret}`);
    if (IS_ROOT) {
      const onHost: string[] = [];
      const { readdirSync } = await import('node:fs');
      for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
        try {
          if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(secret)) onHost.push(pid);
        } catch {
          // Gone meanwhile.
        }
      }
      expect(onHost).toEqual([]);
    }
  });

  it('cannot open the FIFOs of a process berth has not started yet (to read its output or write to its stdin later)', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 'a');
    // This shell's own FIFOs are open to it until berth, told it runs, unlinks them: it waits (bounded) for that first.
    const r = await sh(sb, 'own=$(readlink /proc/$$/fd/1); for i in $(seq 500); do [ -p "$own" ] || break; sleep 0.02; done; ' +
      'n=0; for f in /run/berth/*; do n=$((n+1)); { : <>"$f"; } 2>/dev/null && echo "opened $f"; chmod 666 "$f" 2>/dev/null && echo "chmod $f"; done; echo "tried $n"');
    expect(r.stdout).not.toMatch(/opened|chmod/);
    expect(Number(/tried (\d+)/.exec(r.stdout)?.[1])).toBeGreaterThan(4);
  });

  it('cannot fill memory through a tmpfs: / and /dev are read-only, /tmp and /dev/shm bounded', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 'a', { tmpSizeBytes: 4 << 20 });
    const write = (path: string) => `dd if=/dev/zero of=${path} bs=1M count=8 2>/dev/null; echo "${path} $(stat -c %s ${path} 2>/dev/null || echo none)"`;
    const r = await sh(sb, ['/x', '/dev/x', '/usr/x', '/etc/x', '/tmp/x', '/dev/shm/x', '/workspace/x'].map(write).join('; '));
    expect(r.stdout.trim().split('\n')).toEqual([
      '/x none',
      '/dev/x none',
      '/usr/x none',
      '/etc/x none',
      `/tmp/x ${4 << 20}`,
      `/dev/shm/x ${4 << 20}`,
      `/workspace/x ${8 << 20}`,
    ]);
  });

  it('caps the processes of a sandbox (RLIMIT_NPROC) without touching another sandbox', async () => {
    const root = tempRoot();
    const a = await testSandbox(host, root, range, 'a', { maxProcesses: 16 });
    const b = await testSandbox(host, root, range, 'b', { maxProcesses: 16 });
    const bomb = await sh(a.sb, 'for i in $(seq 30); do (sleep 30 >/dev/null 2>&1 &) 2>/dev/null || { echo refused-at $i; break; }; done; true');
    expect(bomb.stdout).toMatch(/refused-at \d+/);
    expect((await sh(b.sb, 'echo b-still-runs')).stdout).toBe('b-still-runs\n');
  });
});
