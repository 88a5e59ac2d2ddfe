import { readFileSync, readdirSync, statSync, mkdirSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { Writable } from 'node:stream';
import { basename, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spillCapBytes } from '../../src/shell/output-capture.js';
import { PersistentShell, snapshotPathOf } from '../../src/shell/persistent-shell.js';
import type { ShellTransport } from '../../src/shell/transport.js';
import { makeFixture, type Fixture } from './shell-local-transport.js';

const T = { timeoutMs: 10_000 };

describe('PersistentShell (real bash)', () => {
  let fx: Fixture;
  const shells: PersistentShell[] = [];
  const start = async (...args: Parameters<Fixture['options']>): Promise<PersistentShell> => {
    const sh = await PersistentShell.start(fx.options(...args));
    shells.push(sh);
    return sh;
  };

  beforeEach(() => {
    fx = makeFixture();
  });
  afterEach(async () => {
    for (const sh of shells.splice(0)) await sh.close();
    fx.cleanup();
  });

  it('keeps cd, export, functions and aliases between commands', async () => {
    const sh = await start();
    mkdirSync(join(fx.dir, 'sub dir'));
    const a = await sh.run(`cd 'sub dir' && export FOO='a b' && greet() { echo "hi $1"; } && alias ll='echo aliased'`, T);
    expect(a.exitCode).toBe(0);
    expect(a.cwd).toBe(join(fx.dir, 'sub dir'));
    const b = await sh.run('echo "$FOO"; greet you; ll; pwd; declare -x LOCALX=1', T);
    expect(b.stdout).toBe(`a b\nhi you\naliased\n${join(fx.dir, 'sub dir')}\n`);
    const c = await sh.run('echo "$LOCALX"; env | grep -c "^LOCALX=1$"', T);
    expect(c.stdout).toBe('1\n1\n');
  });

  it('keeps stdout and stderr apart, combined in order, with exit codes', async () => {
    const sh = await start();
    const r = await sh.run('echo out; sleep 0.05; echo err >&2; sleep 0.05; echo out2; exit_code() { return 7; }; exit_code', T);
    expect(r.exitCode).toBe(7);
    expect(r.stdout).toBe('out\nout2\n');
    expect(r.stderr).toBe('err\n');
    expect(r.output).toBe('out\nerr\nout2\n');
    expect(r.timedOut).toBe(false);
    expect(r.truncated).toBe(false);
    expect(r.shellReplaced).toBeUndefined();
  });

  it('is not fooled by fake end markers, quotes, heredocs or output without a newline', async () => {
    const sh = await start();
    const cmd = [
      `printf 'BERTH_END_deadbeef 0 /\\n'`,
      `echo "it's \\"quoted\\"" 'a'\\''b'`,
      `cat <<'EOF'\n$HOME 'single' "double" \\ \` ~\nEOF`,
      `printf '%s~0 /tmp%s~' abc abc >&2`,
      'printf no-newline',
    ].join('\n');
    const r = await sh.run(cmd, T);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe(`BERTH_END_deadbeef 0 /\nit's "quoted" a'b\n$HOME 'single' "double" \\ \` ~\nno-newline`);
    expect(r.stderr).toBe('abc~0 /tmpabc~');
    const next = await sh.run('echo next', T);
    expect(next.stdout).toBe('next\n');
  });

  it('reports a syntax error as a failed command and stays usable', async () => {
    const sh = await start();
    const r = await sh.run('echo "unterminated', T);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/unexpected EOF|matching/);
    expect((await sh.run('echo ok', T)).stdout).toBe('ok\n');
  });

  it('passes binary output through without breaking the framing', async () => {
    const sh = await start();
    const r = await sh.run('head -c 3000 /dev/urandom; printf "\\0\\377\\376"; echo; echo tail-ok', T);
    expect(r.exitCode).toBe(0);
    expect(r.stdout.endsWith('\ntail-ok\n')).toBe(true);
    expect((await sh.run('echo after', T)).stdout).toBe('after\n');
  });

  it('caps huge output with head, tail and a path-free notice, and spills privately up to a size cap', async () => {
    const sh = await start({ maxOutputChars: 1000 });
    const r = await sh.run('yes | head -c 50000000; echo done >&2', { timeoutMs: 60_000 });
    expect(r.exitCode).toBe(0);
    expect(r.truncated).toBe(true);
    expect(r.fullOutputPath).toBeDefined();
    const path = r.fullOutputPath as string;
    const cap = spillCapBytes(1000);
    expect(cap).toBe(10 * 1024 * 1024);
    expect(statSync(path).size).toBeLessThanOrEqual(cap);
    expect(statSync(path).size).toBeGreaterThan(cap - 1024);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(fx.spillDir).mode & 0o777).toBe(0o700);
    const notice = /\[\.\.\. (\d+) chars omitted; full output kept by berth \(fullOutputPath\) \.\.\.\]/;
    for (const text of [r.stdout, r.output]) {
      const m = notice.exec(text);
      expect(m).not.toBeNull();
      expect(text).not.toContain(fx.spillDir);
      const lines = text.split('\n');
      expect(lines.filter((l) => notice.test(l))).toHaveLength(1);
      expect(text.length - (m?.[0].length ?? 0)).toBeLessThanOrEqual(1000 + 2);
    }
    expect(r.stdout.startsWith('y\ny\n')).toBe(true);
    expect(r.output.endsWith('done\n')).toBe(true);
    expect(r.stderr).toBe('done\n');
    const full = readFileSync(path, 'utf8');
    expect(full.startsWith('y\ny\n')).toBe(true);
    expect(full).toMatch(/\n\[berth: output cut here; the spill file keeps at most 10485760 bytes, \d+ more bytes were not saved\]\n$/);
    // The file stays while the shell is open, and goes when it closes.
    expect((await sh.run('echo small', T)).stdout).toBe('small\n');
    expect(existsSync(path)).toBe(true);
    await sh.close();
    expect(existsSync(path)).toBe(false);
    expect(readdirSync(fx.spillDir)).toEqual([]);
  });

  it('keeps only the last spill file of a shell, and removes it at close', async () => {
    const sh = await start({ maxOutputChars: 1000 });
    const a = await sh.run('head -c 5000 /dev/zero', T);
    const b = await sh.run('head -c 5000 /dev/zero', T);
    expect(a.fullOutputPath).toBeDefined();
    expect(b.fullOutputPath).toBeDefined();
    expect(existsSync(a.fullOutputPath as string)).toBe(false);
    expect(readdirSync(fx.spillDir)).toEqual([basename(b.fullOutputPath as string)]);
    await sh.close();
    expect(readdirSync(fx.spillDir)).toEqual([]);

  });

  it('without a spill dir nothing is written: the result is capped, says so and has no fullOutputPath', async () => {
    const sh = await start({ maxOutputChars: 1000, spillDir: undefined });
    const chunks: string[] = [];
    const r = await sh.run('head -c 5000 /dev/zero | tr "\\0" a', { ...T, onChunk: (_s, c) => chunks.push(c) });
    expect(r.truncated).toBe(true);
    expect(r.fullOutputPath).toBeUndefined();
    expect(r.stdout).toMatch(/\[\.\.\. \d+ chars omitted \.\.\.\]/);
    expect(chunks.join('')).toBe('a'.repeat(5000));
    await sh.close();
    expect(existsSync(fx.spillDir) ? readdirSync(fx.spillDir) : []).toEqual([]);
  });

  it('spills binary output byte for byte', async () => {
    const sh = await start({ maxOutputChars: 500 });
    const r = await sh.run('head -c 3000 /dev/urandom', T);
    expect(r.truncated).toBe(true);
    expect(statSync(r.fullOutputPath as string).size).toBe(3000);
    expect(r.stdout.length).toBeLessThanOrEqual(500 + 200);
  });

  it('runs 200 commands in a row with the right outputs', async () => {
    const sh = await start();
    for (let i = 0; i < 200; i++) {
      const r = await sh.run(`echo ${i}; echo e${i} >&2; (exit ${i % 5})`, T);
      expect(r.stdout).toBe(`${i}\n`);
      expect(r.stderr).toBe(`e${i}\n`);
      expect(r.exitCode).toBe(i % 5);
    }
  });

  it('serializes concurrent runs in call order', async () => {
    const sh = await start();
    const rs = await Promise.all([
      sh.run('sleep 0.2; echo first; export ORDER=1', T),
      sh.run('echo "second $ORDER"; export ORDER=2', T),
      sh.run('echo "third $ORDER"', T),
    ]);
    expect(rs.map((r) => r.stdout)).toEqual(['first\n', 'second 1\n', 'third 2\n']);
  });

  it('feeds stdin (text and binary-ish) and /dev/null otherwise, never the control stream', async () => {
    const sh = await start();
    const text = await sh.run('cat; echo "[rc=$?]"', { ...T, stdin: "line1\nit's %s \\n $HOME `x`\n" });
    expect(text.stdout).toBe("line1\nit's %s \\n $HOME `x`\n[rc=0]\n");
    const bin = Buffer.from([0, 1, 2, 0x25, 0x5c, 0x27, 0x0a, 0x7f, 0x80, 0xfe, 0xff, 0x41]);
    const r = await sh.run('od -An -tx1 | tr -s " \\n" " "', { ...T, stdin: bin });
    expect(r.stdout.trim()).toBe('00 01 02 25 5c 27 0a 7f 80 fe ff 41');
    const none = await sh.run('cat; read -r x; echo "read=$?"', T);
    expect(none.stdout).toBe('read=1\n');
    expect((await sh.run('echo still-here', T)).stdout).toBe('still-here\n');
  });

  it('keeps working under set -uC and after set -e ends the shell', async () => {
    const sh = await start();
    await sh.run('set -uC', T);
    const a = await sh.run('cat', { ...T, stdin: 'one' });
    const b = await sh.run('cat', { ...T, stdin: 'two' });
    expect([a.stdout, b.stdout]).toEqual(['one', 'two']);
    const w = await sh.run('pwd', { ...T, workdir: '/usr' });
    expect(w.stdout).toBe('/usr\n');
    expect(w.stderr).toBe('');
    const f = await sh.run('set -e; false', T);
    expect(f.exitCode).toBe(1);
    expect((await sh.run('echo alive', T)).stdout).toBe('alive\n');
  });

  it('runs a one-off workdir without recording it, and refuses a missing one', async () => {
    const sh = await start();
    mkdirSync(join(fx.dir, 'w'));
    const r = await sh.run('pwd; cd ..; export W=1', { ...T, workdir: join(fx.dir, 'w') });
    expect(r.stdout).toBe(`${join(fx.dir, 'w')}\n`);
    expect(r.cwd).toBe(fx.dir);
    expect((await sh.run('pwd; echo $W', T)).stdout).toBe(`${fx.dir}\n1\n`);
    const missing = await sh.run('echo should-not-run', { ...T, workdir: join(fx.dir, 'nope') });
    expect(missing.exitCode).toBe(125);
    expect(missing.stdout).toBe('');
    expect(missing.stderr).toContain(join(fx.dir, 'nope'));
    expect(missing.stderr).toMatch(/^berth: workdir .* does not exist/);
    expect(missing.cwd).toBe(fx.dir);
  });

  it('handles exit 3: result with the output, then a new shell with the state restored', async () => {
    const sh = await start();
    await sh.run(`export KEPT=yes; kf() { echo kf; }; alias ka='echo ka'; cd /tmp`, T);
    const r = await sh.run('echo bye; exit 3', T);
    expect(r.exitCode).toBe(3);
    expect(r.stdout).toBe('bye\n');
    expect(r.shellReplaced).toBe(true);
    const after = await sh.run('echo $KEPT; kf; ka; pwd', T);
    expect(after.stdout).toBe('yes\nkf\nka\n/tmp\n');
    expect(after.shellReplaced).toBeUndefined();
  });

  it('restores env, functions, aliases and cwd in a new shell with the same id', async () => {
    const first = await PersistentShell.start(fx.options());
    mkdirSync(join(fx.dir, 'proj'));
    await first.run(`cd proj; export SAVED='x "y" $z'; sf() { echo sf-ok; }; alias sa='echo sa-ok'`, T);
    await first.close();
    await first.close(); // idempotent
    await expect(first.run('true', T)).rejects.toThrow(/closed/);
    const snap = snapshotPathOf(fx.stateDir, 'test-shell');
    expect(statSync(snap).mode & 0o777).toBe(0o600);
    expect(statSync(join(fx.stateDir, 'shells')).mode & 0o777).toBe(0o700);
    const second = await start();
    const r = await second.run('echo "$SAVED"; sf; sa; pwd', T);
    expect(r.stdout).toBe(`x "y" $z\nsf-ok\nsa-ok\n${join(fx.dir, 'proj')}\n`);
    expect(r.cwd).toBe(join(fx.dir, 'proj'));
  });

  it('starts in initialCwd when it exists, else the snapshot cwd, else defaultCwd', async () => {
    const a = await PersistentShell.start(fx.options());
    await a.run('cd /tmp', T);
    await a.close();
    const b = await start({ initialCwd: '/usr' });
    expect((await b.run('pwd', T)).stdout).toBe('/usr\n');
    await b.close();
    const c = await start({ initialCwd: join(fx.dir, 'missing') });
    expect((await c.run('pwd', T)).stdout).toBe('/usr\n'); // b's close recorded /usr
    await c.run(`mkdir -p ${fx.dir}/gone && cd ${fx.dir}/gone && rmdir ${fx.dir}/gone`, T);
    await c.close();
    const d = await start();
    expect((await d.run('pwd', T)).stdout).toBe(`${fx.dir}\n`);
  });

  it('re-exports secrets before each command and never writes them to the snapshot', async () => {
    const secret = 'hunter2-very-secret';
    const sh = await start({ secretNames: ['API_TOKEN'] }, { API_TOKEN: secret });
    const a = await sh.run('echo "${#API_TOKEN}"; unset API_TOKEN; export OTHER=1', T);
    expect(a.stdout).toBe(`${secret.length}\n`);
    const b = await sh.run('echo "${#API_TOKEN}"; API_TOKEN=changed', T);
    expect(b.stdout).toBe(`${secret.length}\n`);
    const c = await sh.run('printenv API_TOKEN | wc -c', T);
    expect(c.stdout.trim()).toBe(String(secret.length + 1));
    await sh.close();
    const snap = readFileSync(snapshotPathOf(fx.stateDir, 'test-shell'), 'utf8');
    expect(snap).toContain('OTHER');
    expect(snap).not.toContain(secret);
    expect(snap).not.toContain('API_TOKEN');
    expect(snap).not.toContain('BERTH_CMD_TAG');
    expect(snap).not.toMatch(/declare -x (PWD|OLDPWD|SHLVL)=/);
  });

  it('redacts secret values in results and live chunks, even split across chunks', async () => {
    const secret = 'S3cr3t-Value-0123456789';
    const chunks: string[] = [];
    const sh = await start({ redactValues: [secret, 'short'] });
    const r = await sh.run(`echo "a ${secret} b"; printf '%s' '${secret.slice(0, 9)}'; sleep 0.1; printf '%s\\n' '${secret.slice(9)}'; echo short >&2`, {
      ...T,
      onChunk: (_s, c) => chunks.push(c),
    });
    expect(r.stdout).toBe('a [REDACTED] b\n[REDACTED]\n');
    expect(r.stderr).toBe('short\n');
    expect(r.output).not.toContain(secret);
    expect(chunks.join('')).not.toContain(secret);
    expect(chunks.join('')).toContain('[REDACTED]');
  });

  it('streams live chunks without markers', async () => {
    const sh = await start();
    const chunks: Array<[string, string]> = [];
    const r = await sh.run('echo one; sleep 0.1; echo two >&2', { ...T, onChunk: (s, c) => chunks.push([s, c]) });
    expect(chunks.filter(([s]) => s === 'stdout').map(([, c]) => c).join('')).toBe('one\n');
    expect(chunks.filter(([s]) => s === 'stderr').map(([, c]) => c).join('')).toBe('two\n');
    expect(r.output).toBe('one\ntwo\n');
  });

  it('counts background jobs and reports activity', async () => {
    const sh = await start();
    expect(sh.busy).toBe(false);
    const before = sh.lastActivityMs;
    const p = sh.run('sleep 0.3 & sleep 0.05', T);
    expect(sh.busy).toBe(true);
    await p;
    expect(sh.busy).toBe(false);
    expect(sh.lastActivityMs).toBeGreaterThanOrEqual(before);
    expect(sh.backgroundJobCount()).toBe(1);
    await sh.run('sleep 0.4', T);
    expect(sh.backgroundJobCount()).toBe(0);
  });

  it('refuses a bad secret name up front', async () => {
    await expect(PersistentShell.start(fx.options({ secretNames: ['BAD-NAME'] }))).rejects.toThrow(/not a valid shell variable name/);
  });

  it('resolves a running command when the shell dies, and reopens on the next run', async () => {
    const sh = await start();
    await sh.run('export STAY=1; cd /tmp', T);
    const r = await sh.run('echo before; kill -9 $$', T);
    expect(r.stdout).toBe('before\n');
    expect(r.exitCode).toBe(137);
    const next = await sh.run('pwd; echo "[$STAY]"', T);
    expect(next.exitCode).toBe(0);
    expect(next.stdout).toBe('/tmp\n[]\n'); // no snapshot was written: cwd from the last report
    expect(r.shellReplaced === true || next.shellReplaced === true).toBe(true);
    expect(existsSync(snapshotPathOf(fx.stateDir, 'test-shell'))).toBe(false);
  });
  describe('a shell that ended before the command began (its end not yet seen)', () => {
    /**
     * The fixture's shells, whose next write of a frame, once armed, kills the shell (SIGKILL, its
     * exit then seen) instead of reaching it: the shell is dead before the command begins, and berth
     * learns it only after the frame went out. `shellsLeft` bounds the shells that may still start.
     */
    function dyingAtNextFrame(over: { exitUnseen?: boolean; hostPipes?: boolean } = {}): { options: ReturnType<Fixture['options']>; arm(): void; shellsLeft: { n: number } } {
      const base = fx.options();
      let armed = false;
      const shellsLeft = { n: Number.POSITIVE_INFINITY };
      const options = {
        ...base,
        open: async (extra: Readonly<Record<string, string>>) => {
          if (shellsLeft.n-- <= 0) throw new Error('no shell may start here any more');
          const t = await base.open(extra);
          const pid = (await t.pids?.())?.host;
          if (pid === undefined) throw new Error('the local transport gave no host pid');
          const stdin = new Writable({
            write(chunk: Buffer, _enc, cb) {
              if (armed && chunk.includes('__bs ')) {
                armed = false;
                process.kill(pid, 'SIGKILL');
                cb();
                return;
              }
              t.stdin.write(chunk, cb);
            },
            final(cb) {
              t.stdin.end(cb);
            },
          });
          // `exitUnseen`: the end is reported without its code, as over a lost link (or bwrap's
          // status FIFO closed by a killed wrapper); `hostPipes` as the transport says, or not.
          const exited = over.exitUnseen === true ? t.exited.then(() => null) : t.exited;
          return Object.assign(Object.create(t) as ShellTransport, { stdin, exited, hostPipes: over.hostPipes ?? t.hostPipes });
        },
      };
      return { options, arm: () => (armed = true), shellsLeft };
    }

    it('runs the command once in the shell that takes over, and says so', async () => {
      const d = dyingAtNextFrame();
      const sh = await PersistentShell.start(d.options);
      shells.push(sh);
      await sh.run('export STAY=kept; cd /tmp', T);
      d.arm();
      const count = join(fx.dir, 'count');
      const r = await sh.run(`echo once >> ${count}; echo "[$STAY] $(wc -l < ${count})"; pwd`, T);
      expect(r.exitCode).toBe(0);
      // Once, in the new shell, in the old one's cwd (killed, it saved no variables).
      expect(r.stdout).toMatch(/^\[.*\] 1\n\/tmp\n$/);
      expect(readFileSync(count, 'utf8')).toBe('once\n');
      expect(r.shellReplaced).toBe(true);
      expect(r.stderr).toMatch(/killed by signal 9 .*before the command began; .*the command was sent to the new shell/);
    });

    it('an end seen without its code on host pipes: the command was not run and is not sent again (the shell may have lived on)', async () => {
      const d = dyingAtNextFrame({ exitUnseen: true });
      const sh = await PersistentShell.start(d.options);
      shells.push(sh);
      d.arm();
      const marker = join(fx.dir, 'ran');
      const r = await sh.run(`touch ${marker}`, T);
      expect(r.exitCode).toBe(125);
      expect(r.stderr).toMatch(/ended unexpectedly .*before the command began \(it was not run\); .*a new shell took over/);
      expect(existsSync(marker)).toBe(false);
      expect((await sh.run('echo next', T)).stdout).toBe('next\n');
    });

    it('an end without its code over a link (bytes may be lost on it): nothing is claimed about the command', async () => {
      const d = dyingAtNextFrame({ exitUnseen: true, hostPipes: false });
      const sh = await PersistentShell.start(d.options);
      shells.push(sh);
      d.shellsLeft.n = 0;
      d.arm();
      // No new shell either: still a result, not a "was not run" failure the broker would act on.
      const r = await sh.run('true', T);
      expect(r.exitCode).toBe(125);
      expect(r.stderr).toMatch(/ended unexpectedly \(was the sandbox removed\?\); no new shell could be started/);
      expect(r.stderr).not.toMatch(/before the command began/);
    });

    it('with no shell to take over, the call fails saying the command was not run, and nothing of it ran', async () => {
      const d = dyingAtNextFrame();
      const sh = await PersistentShell.start(d.options);
      shells.push(sh);
      d.shellsLeft.n = 0;
      d.arm();
      const marker = join(fx.dir, 'ran');
      await expect(sh.run(`touch ${marker}`, T)).rejects.toMatchObject({
        code: 'shell_start_failed',
        message: expect.stringMatching(/before the command began, and no new shell could be started .*the command was not run/),
      });
      expect(existsSync(marker)).toBe(false);
      // The next call starts a shell again.
      d.shellsLeft.n = 1;
      expect((await sh.run(`touch ${marker}`, T)).exitCode).toBe(0);
      expect(existsSync(marker)).toBe(true);
    });
  });

  it('runs non-ASCII text, quotes, backslashes and long lines exactly (the frame is read by length, not by line)', async () => {
    const sh = await start();
    mkdirSync(join(fx.dir, 'dïr ✓'));
    const text = `ünïcødé ✓ 'single' "double" \\ \\\\ $HOME \` 🚀`;
    const r = await sh.run(`printf '%s\\n' ${JSON.stringify(text).replace(/\$/g, '\\$').replace(/`/g, '\\`')}`, T);
    expect(r.stdout).toBe(`${text}\n`);
    const cd = await sh.run("cd 'dïr ✓' && export E=é && echo \"$E\"", T);
    expect(cd.stdout).toBe('é\n');
    expect(cd.cwd).toBe(join(fx.dir, 'dïr ✓'));
    // A workdir and stdin with non-ASCII bytes, under a UTF-8 locale the user set.
    const w = await sh.run('export LC_ALL=C.UTF-8; cat; pwd', { ...T, workdir: join(fx.dir, 'dïr ✓'), stdin: 'ä\n' });
    expect(w.stdout).toBe(`ä\n${join(fx.dir, 'dïr ✓')}\n`);
    expect((await sh.run("echo 'ö✓'", T)).stdout).toBe('ö✓\n');
    // 200 KB of command text in one line, then the shell is still in step.
    const long = `: ${'x'.repeat(200_000)}; echo long-ok`;
    expect((await sh.run(long, T)).stdout).toBe('long-ok\n');
    expect((await sh.run('echo next', T)).stdout).toBe('next\n');
  });

  it('keeps working when the user turns aliases off or removes berth\'s own, and keeps declare global', async () => {
    const sh = await start();
    expect((await sh.run('shopt -u expand_aliases; echo off', T)).stdout).toBe('off\n');
    const after = await sh.run('echo still; declare G=1', T);
    expect(after.stdout).toBe('still\n');
    expect((await sh.run('echo "g=${G-unset}"', T)).stdout).toMatch(/^g=(1|unset)\n$/);
    expect((await sh.run('unalias -a; echo gone', T)).stdout).toBe('gone\n');
    expect((await sh.run('echo back; declare H=2', T)).stdout).toBe('back\n');
    // Once berth's alias is back, declare runs at top level again: the variable persists.
    expect((await sh.run('declare K=3', T)).exitCode).toBe(0);
    expect((await sh.run('echo "k=$K"', T)).stdout).toBe('k=3\n');
    // The command never sees the frame it came in.
    expect((await sh.run('echo "[${__bc-}][${__bn-}]"', T)).stdout).toBe('[][]\n');
  });
  it('on the local backend the shell reads a real pipe (a FIFO, unlinked), so commands get /dev/null without a redirect', async () => {
    const sh = await start();
    const r = await sh.run('readlink /proc/$$/fd/0; [ -p /proc/$$/fd/255 ] && readlink /proc/$$/fd/255; readlink /proc/self/fd/0', T);
    const [shellIn, control, commandIn] = r.stdout.trim().split('\n');
    expect(shellIn).toBe('/dev/null');
    expect(control).toMatch(/berth-stdin-[^/]+\/stdin \(deleted\)$/);
    expect(commandIn).toBe('/dev/null');
    expect(readdirSync(tmpdir()).filter((n) => n.startsWith('berth-stdin-'))).toEqual([]);
  });
});
