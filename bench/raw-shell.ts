import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/** The baseline: a bare persistent bash over a pipe with a per-command nonce, nothing else. */
export class RawShell {
  private readonly child: ChildProcessWithoutNullStreams;
  private buf = '';
  private waiter: { marker: string; resolve: (out: string) => void } | undefined;

  constructor() {
    this.child = spawn('bash', ['--noprofile', '--norc'], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout.setEncoding('utf8').on('data', (d: string) => {
      this.buf += d;
      const w = this.waiter;
      if (w) {
        const i = this.buf.indexOf(w.marker);
        if (i !== -1) {
          const out = this.buf.slice(0, i);
          this.buf = this.buf.slice(i + w.marker.length);
          this.waiter = undefined;
          w.resolve(out);
        }
      }
    });
  }

  run(cmd: string): Promise<string> {
    const nonce = randomBytes(12).toString('hex');
    const marker = `__END_${nonce}__`;
    return new Promise((resolve) => {
      this.waiter = { marker, resolve };
      this.child.stdin.write(`${cmd}\nprintf '%s' '${marker}'\n`);
    });
  }

  close(): void {
    this.child.kill('SIGKILL');
  }
}

/** The other baseline: a new `bash -c` process per command. */
export function spawnPerCommand(cmd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = spawn('bash', ['-c', cmd], { stdio: 'ignore' });
    c.on('error', reject);
    c.on('close', () => resolve());
  });
}
