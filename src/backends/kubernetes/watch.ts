import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { ApiException } from '@kubernetes/client-node';
import { fromKubeError, type KubeClient } from './kube-client.js';

/*
 * Waiting for one object to reach a state, as kubectl wait does it: a list of that one name
 * (fieldSelector metadata.name) gives its state and the collection's resourceVersion, then a
 * watch from there (with bookmarks, which keep the resourceVersion fresh while nothing changes)
 * reports each change as it happens. A watch the server ends is opened again from the last
 * resourceVersion; one that says 410 Gone (the history no longer reaches back that far) is a new
 * list first. Every wait is bounded.
 */

interface Meta {
  metadata?: { resourceVersion?: string };
}

interface WatchEvent<O> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: O & Meta & { code?: number; message?: string; reason?: string };
}

export interface WatchSpec<O, T> {
  /** The namespaced collection's API path, e.g. `/api/v1/namespaces/berth/pods`. */
  collection: string;
  name: string;
  timeoutMs: number;
  /**
   * What the object's state means (undefined: there is none): `{ value }` when the wait is over,
   * undefined to wait on; it throws to fail the wait.
   */
  decide: (obj: O | undefined) => { value: T } | undefined;
  /** A time (epoch ms) at which `decide` must look again even if nothing changes (a bound of its own). */
  wakeAt?: () => number | undefined;
  /** The error at the deadline, from the last state seen. */
  timedOut: (last: O | undefined) => Error;
  /** The object as a create just answered: the watch starts from its resourceVersion, with no list. */
  known?: O;
  /** The call, for error messages (`wait for pod x`). */
  doing: string;
}

/** A watch that ended this soon without telling anything is not opened again at once. */
const QUIET_REWATCH_MS = 1000;

async function* events<O>(stream: Readable): AsyncGenerator<WatchEvent<O>> {
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  try {
    for await (const line of lines) if (line.trim() !== '') yield JSON.parse(line) as WatchEvent<O>;
  } finally {
    lines.close();
    stream.destroy();
  }
}

/** Waits until `spec.decide` settles on the object's state, watching it; see WatchSpec. */
export async function watchObject<O extends Meta, T>(client: KubeClient, spec: WatchSpec<O, T>): Promise<T> {
  const deadline = Date.now() + spec.timeoutMs;
  const fieldSelector = `metadata.name=${spec.name}`;
  let last: O | undefined;
  let rv: string;
  const list = async (): Promise<void> => {
    const found = (await client.transport.getJson(spec.collection, { fieldSelector })) as { metadata?: { resourceVersion?: string }; items?: O[] };
    last = found.items?.[0];
    rv = found.metadata?.resourceVersion ?? '';
  };
  try {
    const knownRv = spec.known?.metadata?.resourceVersion;
    if (knownRv === undefined) await list();
    else [last, rv] = [spec.known, knownRv];
    for (;;) {
      const settled = spec.decide(last);
      if (settled !== undefined) return settled.value;
      const now = Date.now();
      if (now >= deadline) {
        // One list before giving up: what the server holds now decides, not the last event seen.
        await list();
        const final = spec.decide(last);
        if (final !== undefined) return final.value;
        throw spec.timedOut(last);
      }
      const wake = Math.min(deadline, spec.wakeAt?.() ?? deadline);
      const aborter = new AbortController();
      const timer = setTimeout(() => aborter.abort(), Math.max(0, wake - now));
      let expired = false;
      let told = false;
      let woke = false;
      try {
        const stream = await client.transport.openWatch(spec.collection, {
          fieldSelector, resourceVersion: rv!, allowWatchBookmarks: 'true', timeoutSeconds: String(Math.max(1, Math.ceil((deadline - now) / 1000))),
        }, aborter.signal);
        for await (const event of events<O>(stream)) {
          told = true;
          if (event.type === 'ERROR') {
            if (event.object.code !== 410) throw new ApiException(event.object.code ?? 500, `watch ${spec.collection}`, JSON.stringify(event.object), {});
            expired = true;
            break;
          }
          rv = event.object.metadata?.resourceVersion ?? rv!;
          if (event.type === 'BOOKMARK') continue;
          last = event.type === 'DELETED' ? undefined : event.object;
          const now = spec.decide(last);
          if (now !== undefined) return now.value;
        }
      } catch (err) {
        // Aborted at `wake`: `decide` looks again (the loop's top), and the deadline is checked.
        if (!aborter.signal.aborted) throw err;
      } finally {
        clearTimeout(timer);
        woke = aborter.signal.aborted;
        aborter.abort();
      }
      if (expired) await list();
      else if (!told && !woke && Date.now() - now < QUIET_REWATCH_MS) await new Promise((resolve) => setTimeout(resolve, Math.max(0, Math.min(QUIET_REWATCH_MS, deadline - Date.now()))));
    }
  } catch (err) {
    throw fromKubeError(client, err, spec.doing);
  }
}
