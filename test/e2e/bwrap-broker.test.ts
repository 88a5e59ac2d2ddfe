import { spawn } from 'node:child_process';
import { chownSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it, onTestFinished } from 'vitest';
import { BerthError, PolicyRefusedError } from '../../src/errors.js';
import { bwrapInstall, describeBwrap, IS_ROOT, testRange, type BwrapInstall } from '../helpers/bwrap.js';

/*
 * The bwrap backend through the library (Broker → module → backend → init loop), as an agent's
 * commands reach it: what a command cannot read or hold, the attached workspace at /workspace
 * under the docker mount rules, and start-up that fails closed.
 */

const range = testRange();

const install = (): BwrapInstall => bwrapInstall('berth-bwrap-broker-', range);

describeBwrap('bwrap backend through the broker', () => {
  it('a command cannot read /etc/shadow, berth\'s home or another sandbox\'s dir, and holds no capability', async () => {
    const t = install();
    writeFileSync(join(t.home, 'berth-secret'), 'berth-home-secret-value');
    const b = await t.open();
    const other = await b.exec({ session: 'other' }, 'echo other-private > /workspace/secret; echo ok');
    expect(other.exitCode, other.output).toBe(0);
    const dirOf = (key: string) => join(t.root, 'sandboxes', b.list('local').find((x) => x.sandboxKey === key)!.name);
    const otherDir = dirOf('session:other');
    const r = await b.exec({ session: 'me' }, [
      'cat /etc/shadow >/dev/null 2>&1; echo "shadow=$?"',
      `cat ${t.home}/berth-secret 2>/dev/null; echo "home=$?"`,
      `cat ${otherDir}/workspace/secret 2>/dev/null; echo "other=$?"`,
      'grep -h -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status | tr "\\t" " "',
      'id -u',
    ].join('; '));
    expect(r.exitCode, r.output).toBe(0);
    expect(r.stdout).toBe('shadow=1\nhome=1\nother=1\nCapEff: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n1000\n');
    expect(r.stdout).not.toContain('berth-home-secret-value');
    expect(r.stdout).not.toContain('other-private');
    if (IS_ROOT) {
      // On the host each sandbox is an unprivileged uid of the range, never root, and never the other's.
      const uidOf = (ref: string) => statSync(join(ref, 'workspace')).uid;
      const mine = dirOf('session:me');
      expect(uidOf(mine)).toBeGreaterThanOrEqual(range.first);
      expect(uidOf(otherDir)).toBeGreaterThanOrEqual(range.first);
      expect(uidOf(mine)).not.toBe(uidOf(otherDir));
    }
  });

  it('a command cannot read a host process\'s environment, nor berth\'s own', async () => {
    const t = install();
    const hostProc = spawn('sleep', ['60'], { env: { HOST_ONLY_SECRET: 'host-secret-value-42' }, stdio: 'ignore' });
    onTestFinished(() => {
      hostProc.kill('SIGKILL');
    });
    const b = await t.open();
    const r = await b.exec({ session: 'env' }, [
      `cat /proc/${hostProc.pid}/environ 2>/dev/null; echo "direct=$?"`,
      `cat /proc/${process.pid}/environ 2>/dev/null | tr "\\0" "\\n" | grep -c "^PATH=${process.env['PATH']}$"`,
      'grep -l -s host-secret-value /proc/[0-9]*/environ; echo "grep=$?"',
    ].join('; '));
    // Not there at all (the sandbox has its own /proc): no such file, and no environ anywhere holds it.
    expect(r.stdout).toBe('direct=1\n0\ngrep=1\n');
  });

  it('an attached workspace is bound at /workspace and written as its owner; a root-owned one and berth\'s home are refused', async () => {
    const t = install();
    const ws = join(t.root, '..', 'project');
    mkdirSync(ws);
    writeFileSync(join(ws, 'host.txt'), 'from-host\n');
    const owner = range.first + range.count - 1;
    if (IS_ROOT) chownSync(ws, owner, owner);
    const b = await t.open({ workspace: { mount: true } });
    const scope = { session: 'm', workspace: { path: ws, source: 'session' as const } };
    expect(b.explain(scope)).toMatchObject({ mount: ws, isolation: 'namespace' });
    const r = await b.exec(scope, 'cat /workspace/host.txt && echo from-inside > /workspace/inside.txt && pwd');
    expect(r).toMatchObject({ exitCode: 0, stdout: 'from-host\n/workspace\n' });
    expect(readFileSync(join(ws, 'inside.txt'), 'utf8')).toBe('from-inside\n');
    if (IS_ROOT) {
      expect(statSync(join(ws, 'inside.txt')).uid).toBe(owner);
      const rootOwned = join(t.root, '..', 'root-owned');
      mkdirSync(rootOwned);
      const refused = await b.exec({ session: 'r', workspace: { path: rootOwned, source: 'session' } }, 'true').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(PolicyRefusedError);
      expect((refused as Error).message).toMatch(/belongs to root; a bwrap sandbox never runs as root/);
    }
    // The credential-surface rules read the trait: berth's own home is never bound.
    const home = await b.exec({ session: 'h', workspace: { path: t.home, source: 'session' } }, 'true').catch((e: unknown) => e);
    expect(home).toBeInstanceOf(PolicyRefusedError);
  });

  it('start-up fails closed: a bwrap that cannot run is exit 125 with the fix, and nothing runs on the host', async () => {
    const t = install();
    const b = await t.open({ bwrap: { path: '/nonexistent/bwrap' } });
    const marker = join(t.home, 'ran-on-host');
    const err = await b.exec({ session: 'x' }, `touch ${marker}`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('backend_unavailable');
    expect((err as Error).message).toMatch(/bubblewrap \(\/nonexistent\/bwrap\) is not installed: install it .* or set bwrap\.path/);
    expect(() => statSync(marker)).toThrow();
  });

  it('a sandbox root that cannot be made is exit 125 naming it and the fix', async () => {
    const t = install();
    const file = join(t.home, 'a-file');
    writeFileSync(file, '');
    const b = await t.open({ bwrap: { root: join(file, 'root') } });
    const err = await b.exec({ session: 'x' }, 'true').catch((e: unknown) => e);
    expect((err as BerthError).code).toBe('backend_unavailable');
    expect((err as Error).message).toMatch(/the bwrap sandbox root .*a-file\/root cannot be made or used .*set bwrap\.root/);
  });

  it('the filter turned off is said in explain; on, explain has no note', async () => {
    const t = install();
    const on = await t.open();
    expect(on.explain({ session: 's' }).note).toBeUndefined();
    const off = await t.open({ bwrap: { seccomp: false } });
    expect(off.explain({ session: 's' }).note).toMatch(/WITHOUT the syscall filter \(bwrap\.seccomp: false\)/);
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'BERTH_BWRAP') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    onTestFinished(() => {
      process.off('warning', onWarning);
    });
    const r = await off.exec({ session: 's' }, 'grep "^Seccomp:" /proc/self/status');
    expect(r.stdout).toBe('Seccomp:\t0\n');
    // Start-up says it too, on stderr (a process warning), not only in a debug log.
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.join('\n')).toMatch(/bwrap\.seccomp is false: sandboxes run WITHOUT the syscall filter/);
  });
});
