import { existsSync, lstatSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { SandboxHandle, SandboxSpec, SpawnOptions } from '../../src/backends/backend.js';
import type { SpawnedProcess } from '../../src/shell/transport.js';
import { LocalBackend } from '../../src/backends/local/local-backend.js';
import { LocalSandboxHandle } from '../../src/backends/local/sandbox-handle.js';
import { ProcessSandbox } from '../../src/backends/plumbing/process-sandbox.js';
import { removeUnder } from '../../src/backends/plumbing/remove-under.js';
import { BackendUnavailableError, BerthError, PolicyRefusedError, TimeoutError } from '../../src/errors.js';
import { tempDir } from '../helpers/temp-dir.js';
import { pidsWithArg } from './shell-local-transport.js';

/*
 * The plumbing written once on a handle's `spawn` (backends/plumbing/): exercised here through the
 * local backend's real spawn, the same code every backend's sandboxes run.
 */

function spec(dirName: string): SandboxSpec {
  return {
    identity: { installation: 'test', tenant: 'local', profile: 'default', key: `session:${dirName}` },
    digest: 'cd'.repeat(32), dirName, ephemeral: true, mount: null, rule: 'auto:5', section: undefined,
  };
}

function localSandbox(): { sandbox: ProcessSandbox; dir: string } {
  const dir = realpathSync(tempDir('berth-plumbing-'));
  return { sandbox: new ProcessSandbox(new LocalSandboxHandle(spec('plumbing'), dir)), dir };
}

async function waitGone(marker: string): Promise<number[]> {
  const deadline = Date.now() + 5_000;
  while (pidsWithArg(marker).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return pidsWithArg(marker);
}

describe('execOnce over spawn', () => {
  it('a timeout kills the helper and everything it started, then rejects with a TimeoutError', async () => {
    const { sandbox } = localSandbox();
    const marker = `berth-tree-${process.pid}-1`;
    // A child in the background and one in the foreground: both must go.
    // A duration of this run's own (GNU sleep takes a fraction): other files sleep 1000 on this host too.
    const nap = `1000.${process.pid}`;
    const err = await sandbox.execOnce(['bash', '-c', `sleep ${nap} & sleep ${nap}; echo never`, marker], { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as Error).message).toBe(`helper "bash" in sandbox plumbing did not finish within 300 ms`);
    expect(await waitGone(marker)).toEqual([]);
    // The sleeps carry no marker of their own: find them by their parent having been the helper.
    const out = (await sandbox.execOnce(['sh', '-c', `ps -eo args | grep -c "^sleep ${nap}$" || true`])).stdout.toString().trim();
    expect(Number(out)).toBe(0);
  });

  it('a program that cannot start goes through the spawn translator: a BackendUnavailableError naming it, the errno and the fix', async () => {
    const { sandbox } = localSandbox();
    const err = await sandbox.execOnce(['berth-no-such-program-xyz']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toMatch(/^could not start "berth-no-such-program-xyz" in sandbox plumbing: it was not found .* \(ENOENT\); install it/);
  });

  it('reports exit codes and keeps stdout and stderr apart', async () => {
    const { sandbox } = localSandbox();
    const r = await sandbox.execOnce(['sh', '-c', 'echo out; echo err >&2; exit 7']);
    expect([r.exitCode, r.stdout.toString(), r.stderr.toString()]).toEqual([7, 'out\n', 'err\n']);
  });
});

describe('tar through spawn', () => {
  it('an archive of a path that does not exist errors the stream (transfer_failed), never ends it like a short archive', async () => {
    const { sandbox, dir } = localSandbox();
    const stream = await sandbox.getArchive(join(dir, 'missing'));
    const err = await new Promise((resolve) => {
      stream.on('error', resolve);
      stream.on('end', () => resolve(undefined));
      stream.resume();
    });
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('transfer_failed');
    expect((err as Error).message).toMatch(/^reading .*\/missing in sandbox plumbing failed \(tar exit 2\)/);
  });

  it('a source that fails mid-way stops tar and rejects with the source\'s error', async () => {
    const { sandbox, dir } = localSandbox();
    mkdirSync(join(dir, 'in'));
    const source = new PassThrough();
    const put = sandbox.putArchive(join(dir, 'in'), source);
    source.write(Buffer.alloc(512, 0x61));
    const cut = new Error('upload cut short');
    setTimeout(() => source.destroy(cut), 50);
    await expect(put).rejects.toBe(cut);
    const tars = (await sandbox.execOnce(['sh', '-c', `ps -eo args | grep -c "^tar -x -o -f - -C ${join(dir, 'in')}$" || true`])).stdout.toString().trim();
    expect(Number(tars)).toBe(0);
  });
});

describe('a sandbox is its handle plus the plumbing', () => {
  /** A handle that records what it is asked to start, and starts nothing. */
  function recordingHandle(): { handle: SandboxHandle; started: { argv: readonly string[]; opts: SpawnOptions }[] } {
    const started: { argv: readonly string[]; opts: SpawnOptions }[] = [];
    const handle: SandboxHandle = {
      ...new LocalSandboxHandle(spec('rec'), '/nonexistent'),
      hostPathOf: () => undefined,
      spawn: async (argv, opts): Promise<SpawnedProcess> => {
        started.push({ argv, opts });
        const out = Readable.from([]);
        return { stdin: opts.stdin ? new PassThrough() : null, stdout: out, stderr: Readable.from([]), exited: Promise.resolve(0), kill: async () => undefined };
      },
    };
    return { handle, started };
  }

  it('a shell is `bash --noprofile --norc` with the granted env in the spawn\'s env, never on its argv', async () => {
    const { handle, started } = recordingHandle();
    const secret = 'sk-plumbing-0123456789';
    await new ProcessSandbox(handle).openShell({ env: { API_KEY: secret }, cwd: '/w' });
    expect(started).toEqual([{ argv: ['bash', '--noprofile', '--norc'], opts: { env: { API_KEY: secret }, cwd: '/w', stdin: true, lasting: true } }]);
    expect(started[0]!.argv.join(' ')).not.toContain(secret);
  });

  it('a backend overrides one piece by subclassing; the rest still runs on its spawn', async () => {
    const { handle, started } = recordingHandle();
    class OwnArchives extends ProcessSandbox {
      override async getArchive(_path: string): Promise<Readable> {
        return Readable.from([Buffer.from('engine archive')]);
      }
    }
    const sb = new OwnArchives(handle);
    const chunks: Buffer[] = [];
    for await (const c of await sb.getArchive('/w/x')) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe('engine archive');
    await sb.putArchive('/w', Buffer.alloc(0));
    expect(started.map((s) => s.argv[0])).toEqual(['tar']);
  });
});

describe('delete only under the root', () => {
  function tree(): { root: string; outside: string } {
    const base = realpathSync(tempDir('berth-rm-'));
    const root = join(base, 'sandboxes', 'local');
    mkdirSync(join(root, 'a', 'deep'), { recursive: true });
    writeFileSync(join(root, 'a', 'deep', 'f'), 'x');
    const outside = join(base, 'precious');
    mkdirSync(outside);
    writeFileSync(join(outside, 'keep'), 'keep');
    return { root, outside };
  }

  it('removes a dir under the root, and a dir already gone is success', async () => {
    const { root } = tree();
    await removeUnder(root, join(root, 'a'));
    expect(existsSync(join(root, 'a'))).toBe(false);
    await removeUnder(root, join(root, 'a'));
  });

  it('refuses the root itself, anything outside it and `..` ways out; nothing is deleted', async () => {
    const { root, outside } = tree();
    for (const target of [root, outside, join(root, '..', '..', 'precious'), join(root, 'a', '..', '..')]) {
      await expect(removeUnder(root, target), target).rejects.toBeInstanceOf(PolicyRefusedError);
    }
    expect(readFileSync(join(outside, 'keep'), 'utf8')).toBe('keep');
    expect(existsSync(join(root, 'a', 'deep', 'f'))).toBe(true);
  });

  it('a link under the root is removed as a link: what it points to outside stays', async () => {
    const { root, outside } = tree();
    symlinkSync(outside, join(root, 'link'));
    await removeUnder(root, join(root, 'link'));
    expect(existsSync(join(root, 'link'))).toBe(false);
    expect(readFileSync(join(outside, 'keep'), 'utf8')).toBe('keep');
  });

  it('a parent swapped for a link out of the root does not lead the delete out', async () => {
    const { root, outside } = tree();
    mkdirSync(join(outside, 'victim'));
    symlinkSync(outside, join(root, 'hop'));
    await expect(removeUnder(root, join(root, 'hop', 'victim'))).rejects.toBeInstanceOf(PolicyRefusedError);
    expect(lstatSync(join(outside, 'victim')).isDirectory()).toBe(true);
  });

  it('the local backend refuses to remove a dir outside its root (it used to skip it silently)', async () => {
    const { root, outside } = tree();
    const backend = new LocalBackend({ berthHome: join(root, '..', '..') });
    await expect(backend.remove(outside, undefined)).rejects.toBeInstanceOf(PolicyRefusedError);
    expect(readFileSync(join(outside, 'keep'), 'utf8')).toBe('keep');
  });
});
