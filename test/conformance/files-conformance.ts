import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { PolicyRefusedError } from '../../src/errors.js';
import { FileTooLargeError, PathNotFoundError } from '../../src/files/errors.js';
import { StagingFullError } from '../../src/files/staging-quota.js';
import { writeTar } from '../../src/files/tar.js';

/*
 * One file-transfer suite, run against every backend (local, docker): the same calls, the same
 * refusals, the same guarantees. `open(extra)` opens a broker on a fresh installation with
 * `extra` merged into the backend's config.
 */

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

function listTree(dir: string, base = dir): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    const st = lstatSync(p);
    const rel = p.slice(base.length + 1);
    if (st.isSymbolicLink()) out.push(`${rel}@`);
    else if (st.isDirectory()) out.push(`${rel}/`, ...listTree(p, base));
    else out.push(rel);
  }
  return out;
}

/** A tar (made by the host's tar) holding one symlink to /etc/passwd. */
function symlinkTar(): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'berth-symtar-'));
  try {
    symlinkSync('/etc/passwd', join(dir, 'ln'));
    return execFileSync('tar', ['-c', '-f', '-', '-C', dir, './ln']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function filesConformance(
  backend: string,
  open: (extra?: Record<string, unknown>) => Promise<{ broker: Broker; home: string }>,
  report: (line: string) => void,
): void {
  it(`${backend}: a 20 MB binary file goes in and comes out byte for byte`, async () => {
    const { broker } = await open();
    const s = { session: 'big' };
    await broker.exec(s, 'true');
    const data = randomBytes(20 * 1024 * 1024);
    let t = Date.now();
    const up = await broker.files.upload(s, { path: 'sub/dir/big.bin', data, mode: 0o640 });
    const upMs = Date.now() - t;
    expect(up.bytes).toBe(data.length);
    const inside = await broker.exec(s, `sha256sum ${up.path} | cut -d' ' -f1; stat -c %a ${up.path}`);
    expect(inside.stdout).toBe(`${sha(data)}\n640\n`);
    t = Date.now();
    const ex = await broker.files.exportPath(s, { path: up.path });
    const exMs = Date.now() - t;
    expect(ex).toMatchObject({ bytes: data.length, kind: 'file' });
    expect(sha(readFileSync(ex.hostPath))).toBe(sha(data));
    expect(lstatSync(ex.hostPath).mode & 0o7777).toBe(0o640);
    expect(lstatSync(dirname(ex.hostPath)).mode & 0o777).toBe(0o700);
    report(`${backend}: 20 MB upload ${upMs} ms, export ${exMs} ms`);
  });

  it(`${backend}: a folder round trip; symlinks and berth's own files never come out`, async () => {
    const { broker } = await open();
    const s = { session: 'tree' };
    const tar = await writeTar([
      { name: 'proj', type: 'dir', mode: 0o755 },
      { name: 'proj/a.txt', type: 'file', mode: 0o644, data: Buffer.from('alpha\n') },
      { name: 'proj/empty', type: 'file', mode: 0o644, data: Buffer.alloc(0) },
      { name: 'proj/deep/er/b.bin', type: 'file', mode: 0o755, data: randomBytes(70_000) },
      // setuid, setgid and sticky bits are never carried, in or out; the permission bits are.
      { name: 'proj/suid', type: 'file', mode: 0o6755, data: Buffer.from('#!/bin/sh\necho ran\n') },
      { name: 'proj/sticky', type: 'dir', mode: 0o3755 },
    ]);
    const up = await broker.files.uploadTar(s, { dir: 'in', tar });
    expect(up.entries).toBe(6);
    await broker.files.upload(s, { path: 'in/proj/one', data: Buffer.from('1'), mode: 0o4750 });
    const modes = await broker.exec(s, '(cd in/proj && stat -c "%n %a" a.txt deep/er/b.bin suid sticky one && ./suid)');
    expect(modes.stdout).toBe('a.txt 644\ndeep/er/b.bin 755\nsuid 755\nsticky 755\none 750\nran\n');
    const check = await broker.exec(s, 'cat in/proj/a.txt; ls in/proj/deep/er; ln -s /etc/passwd in/proj/pw; ln -s a.txt in/proj/rel');
    expect(check.stdout).toBe('alpha\nb.bin\n');
    const ex = await broker.files.exportPath(s, { path: 'in/proj' });
    expect(ex.kind).toBe('dir');
    expect(ex.bytes).toBe(6 + 70_000 + 19 + 1);
    expect(listTree(ex.hostPath)).toEqual(['a.txt', 'deep/', 'deep/er/', 'deep/er/b.bin', 'empty', 'one', 'sticky/', 'suid']);
    const hostModes = ['a.txt', 'deep/er/b.bin', 'suid', 'sticky', 'one'].map((p) => (lstatSync(join(ex.hostPath, p)).mode & 0o7777).toString(8));
    expect(hostModes).toEqual(['644', '755', '755', '755', '750'].map((m) => (Number.parseInt(m, 8) & ~process.umask()).toString(8)));
    // The home holds berth's shell snapshots (.berth): exporting it leaves them out.
    const home = (await broker.exec(s, 'echo "$HOME"; mkdir -p "$HOME/.ssh"; echo k > "$HOME/.ssh/id_x"; echo n > "$HOME/note"')).stdout.trim();
    const h = await broker.files.exportPath(s, { path: home });
    const tree = listTree(h.hostPath);
    expect(tree).toContain('note');
    expect(tree.filter((p) => p.startsWith('.berth') || p.startsWith('.ssh'))).toEqual([]);
  });

  it(`${backend}: the size cap refuses uploads and exports over files.maxBytes and leaves nothing behind`, async () => {
    const { broker, home } = await open({ files: { maxBytes: 1024 * 1024 } });
    const s = { session: 'cap' };
    const err = await broker.files.upload(s, { path: 'x.bin', data: randomBytes(1024 * 1024 + 1) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileTooLargeError);
    expect((err as Error).message).toMatch(/larger than the cap of 1048576 bytes \(files\.maxBytes\); raise files\.maxBytes in the config/);
    expect((await broker.exec(s, 'ls x.bin 2>&1 || true')).stdout).toMatch(/No such file/);
    await broker.exec(s, 'head -c 2000000 /dev/zero > big; mkdir d; head -c 600000 /dev/zero > d/1; head -c 600000 /dev/zero > d/2');
    await expect(broker.files.exportPath(s, { path: 'big' })).rejects.toThrow(/files\.maxBytes/);
    await expect(broker.files.exportPath(s, { path: 'd' })).rejects.toBeInstanceOf(FileTooLargeError);
    await expect(broker.files.readFile(s, { path: 'big' })).rejects.toBeInstanceOf(FileTooLargeError);
    await expect(broker.files.readFile(s, { path: 'd/1', maxBytes: 10 })).rejects.toThrow(/pass a larger maxBytes/);
    expect((await broker.files.readFile(s, { path: 'd/1' })).data.length).toBe(600_000);
    const staging = join(home, 'staging');
    const leftovers = existsSync(staging) ? listTree(staging).filter((p) => !p.endsWith('/')) : [];
    expect(leftovers).toEqual([]);
  });

  it(`${backend}: media is a copy in staging by default, which the agent cannot change or swap afterwards`, async () => {
    const { broker, home } = await open();
    const s = { session: 'media' };
    await broker.exec(s, 'echo before > m.txt');
    const m = await broker.files.mediaPath(s, 'm.txt');
    expect(m.exported).toBe(true);
    expect(m.hostPath.startsWith(join(home, 'staging'))).toBe(true);
    await broker.exec(s, 'rm m.txt; ln -s /etc/hostname m.txt');
    expect(lstatSync(m.hostPath).isFile()).toBe(true);
    expect(readFileSync(m.hostPath, 'utf8')).toBe('before\n');
  });

  it(`${backend}: every archive entry counts 512 bytes against the cap: 20,000 empty files do not pass a small one`, async () => {
    const { broker, home } = await open({ files: { maxBytes: 1024 * 1024 } });
    const s = { session: 'entries' };
    const made = await broker.exec(s, 'mkdir e && for ((i=0;i<20000;i++)); do : > e/f$i; done; ls e | wc -l; mkdir small; : > small/a; : > small/b');
    expect(made.stdout.trim()).toBe('20000');
    await expect(broker.files.exportPath(s, { path: 'e', maxBytes: 1 })).rejects.toThrow(/larger than the cap of 1 bytes \(maxBytes of the call\)/);
    const err = await broker.files.exportPath(s, { path: 'e' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileTooLargeError);
    expect((err as Error).message).toMatch(/^export of "[^"]*\/e" \(over \d+ bytes, counting 512 bytes for each of its \d+ entries so far\) is larger than the cap of 1048576 bytes \(files\.maxBytes\)/);
    // A folder of two empty files is three entries: 1536 bytes.
    expect((await broker.files.exportPath(s, { path: 'small', maxBytes: 1536 })).bytes).toBe(0);
    await expect(broker.files.exportPath(s, { path: 'small', maxBytes: 1535 })).rejects.toBeInstanceOf(FileTooLargeError);
    // A file is one entry: its size plus 512.
    await broker.exec(s, 'head -c 1000 /dev/zero > k');
    expect((await broker.files.exportPath(s, { path: 'k', maxBytes: 1512 })).bytes).toBe(1000);
    await expect(broker.files.exportPath(s, { path: 'k', maxBytes: 1511 })).rejects.toBeInstanceOf(FileTooLargeError);
    // The same for a tar upload.
    const many = await writeTar(Array.from({ length: 20_000 }, (_, i) => ({ name: `u/f${i}`, type: 'file' as const, mode: 0o644, data: Buffer.alloc(0) })));
    const up = await broker.files.uploadTar(s, { dir: 'up', tar: many }).catch((e: unknown) => e);
    expect(up).toBeInstanceOf(FileTooLargeError);
    expect((up as Error).message).toMatch(/^the archive's entries \(over \d+ bytes, counting 512 bytes for each of its \d+ entries so far\) is larger than the cap of 1048576 bytes/);
    expect((await broker.exec(s, 'ls up 2>&1 || true')).stdout).toMatch(/No such file/);
    await broker.closeSession(s);
    const staging = join(home, 'staging');
    expect(existsSync(staging) ? listTree(staging).filter((p) => !p.endsWith('/')) : []).toEqual([]);
  }, 120_000);

  it(`${backend}: staging is bounded per tenant (limits.stagingBytes) across its sessions; a refused export leaves nothing behind`, async () => {
    const { broker, home } = await open({ limits: { stagingBytes: 1024 * 1024 } });
    const a = { session: 'qa' };
    const b = { session: 'qb' };
    const other = { tenant: 'other', session: 'qa' };
    for (const s of [a, b, other]) await broker.exec(s, 'head -c 600000 /dev/zero > f');
    const first = await broker.files.exportPath(a, { path: 'f' });
    expect(first.bytes).toBe(600_000);
    const staging = join(home, 'staging');
    const exportsIn = (): string[] => listTree(staging).filter((p) => !p.endsWith('/') || /\.partial-|-\d+\/$/.test(p));
    const before = exportsIn();
    const err = await broker.files.exportPath(b, { path: 'f' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StagingFullError);
    expect((err as Error).message).toMatch(
      /^export of "[^"]*\/f" would take tenant "local"'s staging over its bound of 1048576 bytes \(limits\.stagingBytes; 600512 bytes are staged or being exported by other calls\); close sessions whose exports are no longer needed \(closing removes them\), or raise limits\.stagingBytes in the config$/,
    );
    await expect(broker.files.mediaPath(b, 'f')).rejects.toBeInstanceOf(StagingFullError);
    expect(exportsIn()).toEqual(before);
    // Another tenant has its own bound.
    expect((await broker.files.exportPath(other, { path: 'f' })).bytes).toBe(600_000);
    // Closing the session that holds the export frees the room.
    await broker.closeSession(a);
    expect((await broker.files.exportPath(b, { path: 'f' })).bytes).toBe(600_000);
  });

  it(`${backend}: concurrent exports of one tenant cannot together pass limits.stagingBytes`, async () => {
    const { broker, home } = await open({ limits: { stagingBytes: 1024 * 1024 } });
    const s = { session: 'qc' };
    await broker.exec(s, 'for i in 1 2 3 4; do head -c 300000 /dev/zero > c$i; done');
    const results = await Promise.allSettled([1, 2, 3, 4].map((i) => broker.files.exportPath(s, { path: `c${i}` })));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(ok.length).toBeGreaterThanOrEqual(1);
    expect(ok.length).toBeLessThanOrEqual(3);
    expect(refused.length).toBe(4 - ok.length);
    for (const r of refused) expect(r.reason).toBeInstanceOf(StagingFullError);
    const files = listTree(join(home, 'staging')).filter((p) => !p.endsWith('/'));
    expect(files).toHaveLength(ok.length);
    expect(ok.length * (300_000 + 512)).toBeLessThanOrEqual(1024 * 1024);
  });

  it(`${backend}: "..", an absolute symlink, /proc/self/environ and the snapshot dir are refused, naming the path and the rule`, async () => {
    const { broker } = await open();
    const s = { session: 'refuse' };
    const home = (await broker.exec(s, 'ln -s /etc/passwd x; ln -s /proc/1 p1; mkdir -p real; ln -s /etc linkdir; echo "$HOME"')).stdout.trim();
    const refused = async (p: Promise<unknown>, rule: RegExp): Promise<void> => {
      const e = await p.then(() => undefined, (err: unknown) => err);
      expect(e, String(rule)).toBeInstanceOf(PolicyRefusedError);
      expect((e as Error).message).toMatch(rule);
    };
    await refused(broker.files.exportPath(s, { path: '../etc/passwd' }), /"\.\.\/etc\/passwd" is refused: "\.\." segments are not allowed/);
    await refused(broker.files.exportPath(s, { path: 'x' }), /\/x" \(resolves to "\/etc\/passwd"\) is outside the sandbox's file roots/);
    await refused(broker.files.readFile(s, { path: '/proc/self/environ' }), /"\/proc\/self\/environ" \(resolves to "\/proc\/\d+\/environ"\) is under \/proc/);
    await refused(broker.files.exportPath(s, { path: 'p1/environ' }), /is under \/proc/);
    await refused(broker.files.exportPath(s, { path: `${home}/.berth` }), /is berth's own state in the sandbox/);
    await refused(broker.files.mediaPath(s, `${home}/.berth/shells`), /berth's own state/);
    await refused(broker.files.upload(s, { path: 'linkdir/evil', data: Buffer.from('x') }), /resolves to "\/etc\/evil"\) is outside/);
    await refused(broker.files.upload(s, { path: '/proc/self/x', data: Buffer.from('x') }), /under \/proc/);
    await refused(broker.files.uploadTar(s, { dir: '.', tar: await writeTar([{ name: 'linkdir/evil', type: 'file', mode: 0o644, data: Buffer.from('x') }]) }), /is a symlink in the sandbox/);
    await refused(broker.files.uploadTar(s, { dir: 'real', tar: await writeTar([{ name: '../evil', type: 'file', mode: 0o644, data: Buffer.from('x') }]) }), /archive entry "\.\.\/evil" is refused/);
    await refused(broker.files.uploadTar(s, { dir: 'real', tar: symlinkTar() }), /archive entry "\.\/ln" is a symlink; uploads carry only files and folders/);
    await expect(broker.files.exportPath(s, { path: 'nope' })).rejects.toBeInstanceOf(PathNotFoundError);
    expect((await broker.exec(s, 'ls /etc/evil 2>&1 || true')).stdout).toMatch(/No such file/);
  });

  it(`${backend}: an upload that cannot land is an error, never a success`, async () => {
    const { broker } = await open();
    const s = { session: 'fail' };
    await broker.exec(s, 'echo f > afile');
    const e = await broker.files.upload(s, { path: 'afile/child.txt', data: Buffer.from('x') }).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(Error);
    expect((e as { code?: string }).code).toBe('transfer_failed');
    const audit = broker.audit({ tenant: 'local', session: 'fail' });
    expect(audit[0]).toMatchObject({ kind: 'upload', exitCode: null });
    expect(audit[0]!.command).toMatch(/\[failed: transfer_failed\]$/);
  });

  it(`${backend}: staging is private to the session and removed when the session closes`, async () => {
    const { broker, home } = await open();
    await broker.exec({ session: 'st' }, 'echo one > f');
    const a = await broker.files.exportPath({ session: 'st' }, { path: 'f' });
    const b = await broker.files.exportPath({ session: 'st', user: 'telegram:1' }, { path: 'f' }).catch(() => undefined);
    expect(a.hostPath.startsWith(join(home, 'staging', 'local'))).toBe(true);
    if (b !== undefined) expect(dirname(dirname(b.hostPath))).not.toBe(dirname(dirname(a.hostPath)));
    expect(readFileSync(a.hostPath, 'utf8')).toBe('one\n');
    await broker.closeSession({ session: 'st' });
    expect(existsSync(a.hostPath)).toBe(false);
    const kinds = broker.audit({ tenant: 'local', session: 'st' }).map((x) => x.kind);
    expect(kinds).toEqual(expect.arrayContaining(['close', 'export', 'exec']));
  });
}
