import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { PassThrough, type Duplex, type Readable, type Writable } from 'node:stream';
import type Dockerode from 'dockerode';
import type { ClientChannel } from 'ssh2';

/**
 * A bare bash behind its three streams, asked one command at a time with the marker protocol at
 * its simplest: after the command, a random marker on stdout (and first on stderr, when both
 * streams are awaited, as berth keeps them apart); the command has answered once the marker has
 * come on each. The floors of the bench: opened on a docker exec's attach stream (`attach`: the
 * engine's own path, stdout and stderr multiplexed), on an ssh channel (`onChannel`), or on a
 * process of this host behind pipes (`onHost`: no engine at all). A shell whose stream or process ends fails its command instead of
 * leaving a round waiting forever.
 *
 * @example
 * const shell = await MarkerShell.attach(docker, container.id, true);
 * await shell.run('echo hi');
 * shell.close();
 */
export class MarkerShell {
  private out = '';
  private err = '';
  private waiter: { key: string; resolve: () => void; reject: (err: Error) => void } | undefined;
  private ended: Error | undefined;

  private constructor(
    private readonly stdin: Writable, stdout: Readable, stderr: Readable,
    private readonly bothStreams: boolean, private readonly stop: () => void,
  ) {
    stdout.setEncoding('latin1').on('data', (d: string) => this.onData(d, false));
    stderr.setEncoding('latin1').on('data', (d: string) => this.onData(d, true));
  }

  /** A bash exec in `container`, attached through the Engine API. */
  static async attach(docker: Dockerode, container: string, bothStreams = false): Promise<MarkerShell> {
    const exec = await docker.getContainer(container).exec({ Cmd: ['bash', '--noprofile', '--norc'], AttachStdin: true, AttachStdout: true, AttachStderr: true });
    const stream = await exec.start({ hijack: true, stdin: true }) as Duplex;
    const out = new PassThrough();
    const err = new PassThrough();
    docker.modem.demuxStream(stream, out, err);
    const shell = new MarkerShell(stream, out, err, bothStreams, () => stream.end());
    stream.once('close', () => shell.fail(new Error(`the attached bash in ${container} ended`)));
    return shell;
  }

  /** A bash already started on an ssh2 exec channel (`exec bash --noprofile --norc`): its stdout and stderr as ssh carries them. */
  static onChannel(channel: ClientChannel, bothStreams = false): MarkerShell {
    const shell = new MarkerShell(channel, channel, channel.stderr, bothStreams, () => channel.end());
    channel.once('close', () => shell.fail(new Error('the bash on an ssh channel ended')));
    return shell;
  }

  /** A bash process on this host behind pipes; both streams awaited. */
  static onHost(): MarkerShell {
    const proc = spawn('bash', ['--norc', '--noprofile'], { stdio: ['pipe', 'pipe', 'pipe'] });
    proc.stdin.on('error', () => undefined);
    const shell = new MarkerShell(proc.stdin, proc.stdout, proc.stderr, true, () => proc.kill('SIGKILL'));
    proc.once('error', (err) => shell.fail(err));
    proc.once('exit', (code, sig) => shell.fail(new Error(`a floor's bash ended (${code ?? sig})`)));
    return shell;
  }

  run(cmd: string): Promise<void> {
    if (this.ended !== undefined) return Promise.reject(this.ended);
    const key = `${randomBytes(12).toString('base64url')}~`;
    return new Promise((resolve, reject) => {
      this.waiter = { key, resolve, reject };
      const nonce = key.slice(0, -1);
      this.stdin.write(this.bothStreams ? `${cmd};printf '%s~' '${nonce}' >&2;printf '%s~' '${nonce}'\n` : `${cmd};printf '%s~' '${nonce}'\n`);
    });
  }

  close(): void {
    this.stop();
  }

  private fail(err: Error): void {
    this.ended ??= err;
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(err);
  }

  private onData(d: string, fromStderr: boolean): void {
    if (fromStderr) this.err += d;
    else this.out += d;
    const w = this.waiter;
    if (w === undefined || !this.out.includes(w.key) || (this.bothStreams && !this.err.includes(w.key))) return;
    this.out = '';
    this.err = '';
    this.waiter = undefined;
    w.resolve();
  }
}
