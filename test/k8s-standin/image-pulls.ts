import { setTimeout as sleep } from 'node:timers/promises';

/*
 * The kubelet's image pulls, as a pod's status shows them: a failed pull is `ErrImagePull` (with
 * the registry's error), then `ImagePullBackOff` ("Back-off pulling image") until the next
 * attempt, after a back-off that starts at 10 s and doubles up to 300 s (kubelet's
 * `imageBackOff`). A pull that succeeds lets the container start.
 */

export interface ImagePullOptions {
  /** Why pull number `attempt` (from 1) of `image` fails, or undefined when it succeeds. */
  fails: (image: string, attempt: number) => string | undefined;
  /** The back-off after the first failure; doubled after each further one, up to 300 s. */
  backoffMs: number;
}

const MAX_BACKOFF_MS = 300_000;

/**
 * Pulls `image` until it succeeds (true) or `signal` aborts (false), telling `report` each
 * waiting state the kubelet would show.
 */
export async function pullImage(image: string, opts: ImagePullOptions, report: (reason: string, message: string) => void, signal: AbortSignal): Promise<boolean> {
  for (let attempt = 1; ; attempt++) {
    const why = opts.fails(image, attempt);
    if (why === undefined) return true;
    const backoff = Math.min(MAX_BACKOFF_MS, opts.backoffMs * 2 ** (attempt - 1));
    report('ErrImagePull', `failed to pull and unpack image "${image}": ${why}`);
    try {
      await sleep(Math.min(1000, backoff / 10), undefined, { signal });
      report('ImagePullBackOff', `Back-off pulling image "${image}"`);
      await sleep(backoff - Math.min(1000, backoff / 10), undefined, { signal });
    } catch {
      return false;
    }
  }
}
