import { PassThrough } from 'node:stream';
import type { SpawnedProcess } from '../../shell/transport.js';
import { SHELL_TAG_VAR } from '../../shell/protocol.js';
import { execOnceInPod } from './exec-once.js';
import type { ExecTarget, PodProcess } from './spawn.js';

/*
 * A pods/exec connection that drops (an API server or kubelet restart, an idle timeout) leaves
 * its process running in the container: nothing can write to it or read from it any more, yet a
 * shell would go on with the rest of a command line, after berth already reported the command
 * as ended. So before the caller sees a dropped process end, berth ends that process in the
 * container: the one process carrying the spawn's tag that the runtime exec'd (its parent is
 * outside the pod's pid namespace, so its PPid is 0). What it started stays for the caller's
 * own sweep, and detached jobs (reparented to PID 1) are left alone, as when a shell dies.
 */

const END_TIMEOUT_MS = 10_000;

/** Kills the exec'd root of tag `$2` (`$1` is the variable name); `/bin/sh` by absolute path. */
const END_DROPPED_SCRIPT =
  'for f in $(grep -zlxF -s "$1=$2" /proc/[0-9]*/environ 2>/dev/null); do p=${f#/proc/}; p=${p%/environ}; ' +
  'pp=$(sed -n "s/^PPid:[[:space:]]*//p" "/proc/$p/status" 2>/dev/null); [ "$pp" = 0 ] && kill -9 "$p" 2>/dev/null; done; true';

/**
 * `proc` as its caller sees it: its output streams and `exited` end only once a dropped
 * connection's process was ended in the container (or that failed and was logged).
 */
export function endingDropped(target: ExecTarget, proc: PodProcess, piped: boolean, log: (msg: string) => void): SpawnedProcess {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  proc.stdout.pipe(stdout, { end: false });
  proc.stderr.pipe(stderr, { end: false });
  let killing = false;
  const settled = proc.ended.then(async (end) => {
    // A kill cuts the connection itself, after ending the process's whole tree.
    if (end.kind === 'dropped' && !killing) {
      log(`exec stream of pod ${target.pod} dropped (${end.reason}); ending its process there`);
      try {
        const r = await execOnceInPod(target, ['/bin/sh', '-c', END_DROPPED_SCRIPT, 'berth-end-dropped', SHELL_TAG_VAR, proc.tag], { timeoutMs: END_TIMEOUT_MS, log });
        log(r.exitCode === 0 ? `ended the process of the dropped exec stream in pod ${target.pod}` : `ending the process of a dropped stream in pod ${target.pod} exited ${r.exitCode}`);
      } catch (err) {
        log(`could not end the process of a dropped stream in pod ${target.pod}: ${(err as Error).message}`);
      }
    }
    return end.kind === 'exited' ? end.code : null;
  });
  // Each stream ends once all it carried went through (a reader may be slower than the socket) and the process is settled.
  for (const [from, to] of [[proc.stdout, stdout], [proc.stderr, stderr]] as const) {
    const drained = new Promise<void>((resolve) => (from.readableEnded ? resolve() : from.once('end', () => resolve())));
    void Promise.all([drained, settled]).then(() => to.end());
  }
  return { stdin: piped ? proc.stdin : null, stdout, stderr, exited: settled, kill: () => {
    killing = true;
    return proc.kill();
  } };
}
