import type Dockerode from 'dockerode';
import { BerthError, SandboxNotFoundError } from '../../errors.js';
import { bounded, ENGINE_REQUEST_TIMEOUT_MS, fromDockerError, inspectImage, statusOf, engineMessage } from './engine.js';
import { buildImage, type BuildImageOptions } from './image-build.js';

/**
 * The registry host of an image reference, by Docker's rule: the first path component names a
 * registry when it contains `.` or `:` or is `localhost`. `berth-sandbox:latest` → undefined.
 */
export function registryHost(image: string): string | undefined {
  const slash = image.indexOf('/');
  if (slash < 0) return undefined;
  const first = image.slice(0, slash);
  return first.includes('.') || first.includes(':') || first === 'localhost' ? first : undefined;
}

/** Pull `image` with progress (one line per layer and status change). */
export async function pullImage(opts: { docker: Dockerode; image: string; onProgress: (line: string) => void }): Promise<void> {
  const { docker, image, onProgress } = opts;
  let stream: NodeJS.ReadableStream;
  try {
    stream = await docker.pull(image);
  } catch (err) {
    if (statusOf(err) === 404) {
      throw new SandboxNotFoundError(`image "${image}" not found in its registry: ${engineMessage(err)}; check docker.image`, {
        cause: err,
      });
    }
    throw fromDockerError(docker, err, `pull ${image}`);
  }
  const last = new Map<string, string>();
  const events = await new Promise<Array<Record<string, unknown>>>((resolve, reject) => {
    docker.modem.followProgress(
      stream,
      (err: Error | null, output: Array<Record<string, unknown>>) => (err ? reject(err) : resolve(output)),
      (event: Record<string, unknown>) => {
        const status = typeof event['status'] === 'string' ? event['status'] : undefined;
        if (status === undefined) return;
        const id = typeof event['id'] === 'string' ? event['id'] : '';
        if (last.get(id) === status) return;
        last.set(id, status);
        onProgress(id ? `${id}: ${status}` : status);
      },
    );
  });
  const failed = events.find((e) => e['error'] !== undefined);
  if (failed) throw new BerthError('image_pull_failed', `could not pull ${image}: ${String(failed['error'])}`);
}

/**
 * Make `image` available: reuse it unless `force`; pull it when it names a registry host;
 * otherwise build it from Debian packages. What `berth image build` runs.
 */
export async function provideImage(opts: BuildImageOptions): Promise<{ action: 'reused' | 'built' | 'pulled' }> {
  if (registryHost(opts.image) === undefined) {
    const { built } = await buildImage(opts);
    return { action: built ? 'built' : 'reused' };
  }
  if (!opts.force) {
    try {
      await bounded(opts.docker, ENGINE_REQUEST_TIMEOUT_MS, `inspect image ${opts.image}`, (abortSignal) => inspectImage(opts.docker, opts.image, abortSignal));
      opts.onProgress(`image ${opts.image} exists; reusing it (--force pulls again)`);
      return { action: 'reused' };
    } catch (err) {
      if (statusOf(err) !== 404) throw fromDockerError(opts.docker, err, `inspect image ${opts.image}`);
    }
  }
  opts.onProgress(`pulling ${opts.image} from ${registryHost(opts.image)}`);
  await pullImage(opts);
  return { action: 'pulled' };
}
