import type { ServerResponse } from 'node:http';

/*
 * Watches as the API server serves them (`?watch=1` on a collection): one JSON event a line on a
 * chunked 200 response, `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}`.
 *
 * - `resourceVersion` unset or "0": synthetic ADDED events for every object that matches now,
 *   then changes. A number N: every change after N, then live ones; when the history no longer
 *   reaches back to N (compacted), one ERROR event carrying a 410 Expired Status, and the end.
 * - A selector filters by the object's state at each change: an object that comes to match is
 *   ADDED, one that stops matching is DELETED, as the watch cache does.
 * - `allowWatchBookmarks=true`: a BOOKMARK (only `metadata.resourceVersion`) every
 *   `bookmarkIntervalMs`, and one as the watch times out.
 * - `timeoutSeconds` ends the response (a normal end: the client watches again from where it was).
 */

type Obj = Record<string, unknown> & { metadata: Record<string, unknown> };
type Labels = Readonly<Record<string, string>>;

export interface ChangeRecord {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  plural: string;
  namespace: string;
  /** The object as it was right after the change (a copy, with kind and apiVersion). */
  object: Obj;
  /** Its labels before the change; undefined for ADDED. */
  before: Labels | undefined;
}

export interface WatchRequest {
  plural: string;
  namespace: string;
  kind: string;
  apiVersion: string;
  /** Label and field selectors together, over an object's labels and itself. */
  matches: (labels: Labels, obj: Obj) => boolean;
  /** The resourceVersion asked for: undefined for "now" (unset or "0"). */
  from: number | undefined;
  bookmarks: boolean;
  timeoutMs: number;
  /** The matching objects now, for a watch from "now". */
  current: () => Obj[];
}

interface Watcher {
  req: WatchRequest;
  res: ServerResponse;
  close: () => void;
}

const labelsOf = (o: Obj): Labels => (o.metadata['labels'] ?? {}) as Labels;

export class WatchHub {
  private history: ChangeRecord[] = [];
  /** Changes up to this resourceVersion are no longer held: a watch from before it is 410 Gone. */
  private compactedTo = 0;
  private readonly watchers = new Set<Watcher>();
  private readonly lastLabels = new Map<string, Labels>();

  constructor(private readonly capacity: number, private readonly bookmarkIntervalMs: number, private readonly latest: () => number) {}

  /** How many watches are open now. */
  get open(): number {
    return this.watchers.size;
  }

  /** Records a change (the object's resourceVersion already bumped) and tells every watcher it concerns. */
  record(type: ChangeRecord['type'], plural: string, namespace: string, key: string, obj: Obj, kind: string, apiVersion: string): void {
    const id = `${plural}/${key}`;
    const before = type === 'ADDED' ? undefined : this.lastLabels.get(id);
    if (type === 'DELETED') this.lastLabels.delete(id);
    else this.lastLabels.set(id, { ...labelsOf(obj) });
    const change: ChangeRecord = { rv: Number(obj.metadata['resourceVersion']), type, plural, namespace, object: { kind, apiVersion, ...structuredClone(obj) }, before };
    this.history.push(change);
    while (this.history.length > this.capacity) this.compactedTo = this.history.shift()!.rv;
    for (const w of this.watchers) this.deliver(w, change);
  }

  /** Forgets every change so far (etcd compaction): a watch from an older resourceVersion is then 410 Gone. */
  compact(): void {
    this.compactedTo = this.latest();
    this.history = [];
  }

  /** Ends every open watch normally (as an API server's restart or a load balancer would). */
  endAll(): void {
    for (const w of [...this.watchers]) w.close();
  }

  serve(req: WatchRequest, res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    if (req.from !== undefined && req.from < this.compactedTo) {
      const message = `too old resource version: ${req.from} (${this.compactedTo + 1})`;
      send(res, { type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason: 'Expired', code: 410 } });
      res.end();
      return;
    }
    const timers: NodeJS.Timeout[] = [];
    const watcher: Watcher = {
      req,
      res,
      close: () => {
        if (!this.watchers.delete(watcher)) return;
        for (const t of timers) clearTimeout(t);
        if (req.bookmarks) this.bookmark(watcher);
        res.end();
      },
    };
    if (req.from === undefined) {
      for (const o of req.current()) send(res, { type: 'ADDED', object: { kind: req.kind, apiVersion: req.apiVersion, ...o } });
    } else {
      for (const change of this.history) if (change.rv > req.from) this.deliver(watcher, change);
    }
    this.watchers.add(watcher);
    timers.push(setTimeout(watcher.close, req.timeoutMs));
    if (req.bookmarks) {
      const tick = setInterval(() => this.bookmark(watcher), this.bookmarkIntervalMs);
      timers.push(tick as unknown as NodeJS.Timeout);
      res.once('close', () => clearInterval(tick));
    }
    res.once('close', () => {
      this.watchers.delete(watcher);
      for (const t of timers) clearTimeout(t);
    });
  }

  private bookmark(w: Watcher): void {
    send(w.res, { type: 'BOOKMARK', object: { kind: w.req.kind, apiVersion: w.req.apiVersion, metadata: { resourceVersion: String(this.latest()) } } });
  }

  private deliver(w: Watcher, change: ChangeRecord): void {
    if (change.plural !== w.req.plural || change.namespace !== w.req.namespace) return;
    const matches = (labels: Labels): boolean => w.req.matches(labels, change.object);
    let type: string | undefined;
    if (change.type === 'DELETED') {
      type = matches(labelsOf(change.object)) ? 'DELETED' : undefined;
    } else {
      const was = change.before !== undefined && matches(change.before);
      if (matches(labelsOf(change.object))) type = was ? 'MODIFIED' : 'ADDED';
      else if (was) type = 'DELETED';
    }
    if (type !== undefined) send(w.res, { type, object: change.object });
  }
}

function send(res: ServerResponse, event: object): void {
  if (!res.writableEnded) res.write(`${JSON.stringify(event)}\n`);
}
