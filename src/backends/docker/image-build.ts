import { spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Transform } from 'node:stream';
import type Dockerode from 'dockerode';
import { BerthError, UnsupportedError } from '../../errors.js';
import { hostMirror } from './apt-sources.js';
import { bounded, ENGINE_REQUEST_TIMEOUT_MS, engineInfo, fromDockerError, inspectImage as inspectImageBounded, PING_TIMEOUT_MS, statusOf, unavailableError } from './engine.js';

export type ImageVariant = 'debian' | 'minimal';

/** Image of the test suites. */
export const TEST_IMAGE = 'berth-sandbox:minimal';

/** Packages added to Debian's minbase: process tools for the shell protocol and a small toolset. */
const DEBIAN_PACKAGES = ['procps', 'psmisc', 'ca-certificates', 'curl', 'git', 'less', 'xz-utils', 'unzip'];

export interface BuildImageOptions {
  docker: Dockerode;
  image: string;
  variant: ImageVariant;
  /** Rebuild even when the image exists. */
  force: boolean;
  onProgress: (line: string) => void;
  /** Debian suite for `debian`; default bookworm. */
  suite?: string;
  /** Debian mirror for `debian`; default: the host's apt sources, else deb.debian.org. */
  mirror?: string;
}

/**
 * Build a sandbox image from Debian packages, without a registry, and import it into the engine
 * tagged `image`. Reuses an existing image unless `force`.
 *
 * @example
 * await buildImage({ docker, image: 'berth-sandbox:minimal', variant: 'minimal', force: false, onProgress: console.log });
 */
export async function buildImage(opts: BuildImageOptions): Promise<{ built: boolean }> {
  const { docker, image, onProgress } = opts;
  try {
    await bounded(docker, PING_TIMEOUT_MS, 'answer a ping', (abortSignal) => engineInfo(docker).ping({ abortSignal }));
  } catch (err) {
    throw statusOf(err) === undefined && !(err instanceof BerthError) ? unavailableError(docker, err) : fromDockerError(docker, err, 'answer a ping');
  }
  const existing = await inspectImage(docker, image);
  if (!opts.force) {
    if (existing) {
      onProgress(`image ${image} exists (${existing.slice(7, 19)}); reusing it (--force rebuilds)`);
      return { built: false };
    }
  }
  const started = Date.now();
  const workDir = await mkdtemp(path.join(os.tmpdir(), 'berth-image-'));
  try {
    const rootfs = path.join(workDir, 'rootfs');
    await mkdir(rootfs);
    if (opts.variant === 'minimal') await minimalRootfs(workDir, rootfs, onProgress);
    else await debianRootfs(rootfs, opts.suite ?? 'bookworm', opts.mirror, onProgress);
    onProgress(`importing ${opts.variant} rootfs as ${image}`);
    const id = await importRootfs(docker, rootfs, image, opts.variant, onProgress);
    onProgress(`built ${image} (${id.slice(7, 19)}) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    if (existing && existing !== id) await removeReplaced(docker, existing, onProgress);
    return { built: true };
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
}

/** Drop the image a forced rebuild replaced, unless containers still use it (409: kept). */
async function removeReplaced(docker: Dockerode, id: string, onProgress: (line: string) => void): Promise<void> {
  try {
    await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, `remove image ${id.slice(7, 19)}`, (abortSignal) => docker.getImage(id).remove({ abortSignal }));
    onProgress(`removed the replaced image ${id.slice(7, 19)}`);
  } catch (err) {
    onProgress(`kept the replaced image ${id.slice(7, 19)}: ${statusOf(err) === 409 ? 'containers still use it' : String(err)}`);
  }
}

async function inspectImage(docker: Dockerode, image: string): Promise<string | undefined> {
  try {
    return (await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, `inspect image ${image}`, (abortSignal) => inspectImageBounded(docker, image, abortSignal))).Id;
  } catch (err) {
    if (statusOf(err) === 404) return undefined;
    throw fromDockerError(docker, err, `inspect image ${image}`);
  }
}

/**
 * busybox-static for the userland and bash-static as /bin/bash (the shell protocol needs bash:
 * `declare -f`, `set -m`, `export -p`), from the host's apt, unpacked without installing.
 */
async function minimalRootfs(workDir: string, rootfs: string, onProgress: (line: string) => void): Promise<void> {
  const debs = path.join(workDir, 'debs');
  await mkdir(debs);
  onProgress('downloading busybox-static bash-static (apt-get download)');
  await run('apt-get', ['download', 'busybox-static', 'bash-static'], { cwd: debs, onLine: onProgress });
  for (const deb of (await readdir(debs)).filter((f) => f.endsWith('.deb'))) {
    onProgress(`unpacking ${deb}`);
    await run('dpkg-deb', ['-x', path.join(debs, deb), rootfs], { onLine: onProgress });
  }
  await rm(path.join(rootfs, 'usr/share/doc'), { recursive: true, force: true });
  for (const dir of ['bin', 'sbin', 'usr/bin', 'usr/sbin', 'etc', 'root', 'workspace', 'proc', 'sys', 'dev']) {
    await mkdir(path.join(rootfs, dir), { recursive: true, mode: dir === 'root' ? 0o700 : 0o755 });
  }
  await mkdir(path.join(rootfs, 'tmp'));
  // Not through mkdir's mode: the umask would clear o+w. Docker copies this mode into the /tmp tmpfs.
  await chmod(path.join(rootfs, 'tmp'), 0o1777);
  await symlink('bash-static', path.join(rootfs, 'bin/bash'));
  // Applet links: ask the (static) busybox itself which applets it has and where they live.
  const applets = (await capture(path.join(rootfs, 'bin/busybox'), ['--list-full'])).split('\n').filter(Boolean);
  let linked = 0;
  for (const applet of applets) {
    const target = path.join(rootfs, applet);
    if (applet === 'bin/busybox' || applet.endsWith('/bash')) continue;
    await mkdir(path.dirname(target), { recursive: true });
    try {
      await symlink('/bin/busybox', target);
      linked += 1;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  onProgress(`linked ${linked} busybox applets`);
  await writeFile(path.join(rootfs, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n');
  await writeFile(path.join(rootfs, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
}

/** `debootstrap --variant=minbase` plus DEBIAN_PACKAGES; needs root (it chroots and mknods). */
async function debianRootfs(
  rootfs: string,
  suite: string,
  mirror: string | undefined,
  onProgress: (line: string) => void,
): Promise<void> {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    throw new UnsupportedError(
      'the debian image variant is built with debootstrap, which needs root; run "berth image build" as root, or use --variant minimal',
    );
  }
  const source = mirror ?? (await hostMirror(suite));
  onProgress(`debootstrap ${suite} from ${source} (minbase + ${DEBIAN_PACKAGES.join(', ')})`);
  await run(
    'debootstrap',
    ['--variant=minbase', `--include=${DEBIAN_PACKAGES.join(',')}`, suite, rootfs, source],
    { onLine: onProgress },
  );
  // Package lists and caches only make the image bigger; `apt-get update` refreshes them.
  await rm(path.join(rootfs, 'var/lib/apt/lists'), { recursive: true, force: true });
  await mkdir(path.join(rootfs, 'var/lib/apt/lists/partial'), { recursive: true });
  await rm(path.join(rootfs, 'var/cache/apt/archives'), { recursive: true, force: true });
  await mkdir(path.join(rootfs, 'var/cache/apt/archives/partial'), { recursive: true });
  await mkdir(path.join(rootfs, 'workspace'), { recursive: true });
}

/** Stream `tar` of the rootfs into `POST /images/create?fromSrc=-`, with berth's labels and defaults. */
async function importRootfs(
  docker: Dockerode,
  rootfs: string,
  image: string,
  variant: ImageVariant,
  onProgress: (line: string) => void,
): Promise<string> {
  const { repo, tag } = splitImage(image);
  // The minimal rootfs may have been unpacked by a non-root user: everything in it is root's.
  // debootstrap's rootfs keeps its owners (root:shadow, _apt, …).
  const owners = variant === 'minimal' ? ['--owner=0', '--group=0'] : [];
  const tar = spawn('tar', ['--numeric-owner', ...owners, '-C', rootfs, '-cf', '-', '.'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const tarDone = waitFor(tar, 'tar');
  let response: NodeJS.ReadableStream;
  try {
    const sent = tar.stdout.pipe(byteCounter((total) => onProgress(`import: ${(total / 1e6).toFixed(1)} MB sent`)));
    response = await docker.importImage(sent, {
      repo,
      tag,
      message: `berth image build --variant ${variant}`,
      changes: [
        `LABEL berth.image=true berth.image.variant=${variant}`,
        'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        'WORKDIR /workspace',
        'CMD ["sleep", "infinity"]',
      ],
    });
  } catch (err) {
    tar.kill('SIGKILL');
    throw fromDockerError(docker, err, `import image ${image}`);
  }
  const events = await new Promise<Array<Record<string, unknown>>>((resolve, reject) => {
    docker.modem.followProgress(
      response,
      (err: Error | null, output: Array<Record<string, unknown>>) => (err ? reject(err) : resolve(output)),
      (event: Record<string, unknown>) => {
        if (typeof event['status'] === 'string') onProgress(`import: ${event['status']}`);
      },
    );
  });
  await tarDone;
  const failed = events.find((e) => e['error'] !== undefined);
  if (failed) throw new BerthError('engine_refused', `docker engine refused to import ${image}: ${String(failed['error'])}`);
  const id = await inspectImage(docker, image);
  if (!id) throw new BerthError('engine_refused', `docker engine imported ${image} but does not list it`);
  return id;
}

/**
 * Passes bytes through unchanged and tells `report` the running total each time another
 * `everyBytes` went by, and once more at the end (so a terminal shows the import's bytes as
 * apt's downloads show theirs).
 */
export function byteCounter(report: (total: number) => void, everyBytes = 4 * 1024 * 1024): Transform {
  let total = 0;
  let reported = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      total += chunk.length;
      if (total - reported >= everyBytes) {
        reported = total;
        report(total);
      }
      done(null, chunk);
    },
    flush(done) {
      if (total !== reported) report(total);
      done();
    },
  });
}

/** `host:5000/name:tag` → `{ repo: 'host:5000/name', tag: 'tag' }`; no tag means `latest`. */
export function splitImage(image: string): { repo: string; tag: string } {
  const slash = image.lastIndexOf('/');
  const colon = image.lastIndexOf(':');
  if (colon > slash) return { repo: image.slice(0, colon), tag: image.slice(colon + 1) };
  return { repo: image, tag: 'latest' };
}

interface RunOptions {
  cwd?: string;
  onLine: (line: string) => void;
}

/** Run a host build tool, forwarding its output lines; rejects with the last lines on failure. */
function run(command: string, args: string[], opts: RunOptions): Promise<void> {
  const child = spawn(command, args, { cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  const tail: string[] = [];
  const onChunk = (() => {
    let partial = '';
    return (chunk: Buffer): void => {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines.map((l) => l.trimEnd()).filter(Boolean)) {
        tail.push(line);
        if (tail.length > 20) tail.shift();
        opts.onLine(line);
      }
    };
  })();
  child.stdout?.on('data', onChunk);
  child.stderr?.on('data', onChunk);
  return waitFor(child, command, tail);
}

function waitFor(child: ReturnType<typeof spawn>, command: string, tail: string[] = []): Promise<void> {
  return new Promise((resolve, reject) => {
    child.once('error', (err: NodeJS.ErrnoException) => {
      reject(
        err.code === 'ENOENT'
          ? new UnsupportedError(`"${command}" is not installed; berth image build needs a Debian/Ubuntu host with apt, dpkg-deb, tar and debootstrap`)
          : err,
      );
    });
    child.once('close', (code, signal) => {
      if (code === 0) resolve();
      else {
        reject(new BerthError('image_build_failed', `${command} failed (${signal ?? `exit ${code}`})${tail.length ? `:\n${tail.join('\n')}` : ''}`));
      }
    });
  });
}

async function capture(command: string, args: string[]): Promise<string> {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const chunks: Buffer[] = [];
  child.stdout?.on('data', (c: Buffer) => chunks.push(c));
  await waitFor(child, command);
  return Buffer.concat(chunks).toString('utf8');
}
