/**
 * Measurements through the stand-in API server, printed as a table; a lower bound for
 * a real cluster (no kubelet, no CRI, no network between berth and the API server):
 *
 *   npx tsx test/k8s-standin/measure.ts [rounds]
 *
 * 1. a trivial command through berth's persistent shell over one exec WebSocket, against a bare
 *    shell on the same kind of WebSocket (a line in, a line out: no berth protocol), and against
 *    the stand-in's own hop (a bare shell on a docker exec attach stream);
 * 2. a new sandbox pod to its first command, against the stand-in's own container start
 *    (docker create + start + a first exec).
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { PassThrough } from 'node:stream';
import Dockerode from 'dockerode';
import { spawnInContainer, type ContainerTarget } from '../../src/backends/docker/spawn.js';
import { demultiplex } from '../../src/backends/docker/exec-stream.js';
import { execOnce } from '../../src/backends/plumbing/exec-once.js';
import { openShellVia } from '../../src/backends/plumbing/open-shell.js';
import { Logger } from '../../src/logging/logger.js';
import { execOnceInPod } from '../../src/backends/kubernetes/exec-once.js';
import { spawnInPod, type ExecTarget } from '../../src/backends/kubernetes/spawn.js';
import { CONTAINER_NAME, sandboxPod, STATE_DIR } from '../../src/backends/kubernetes/manifests.js';
import { createEphemeralPod, deletePod, waitForRunning } from '../../src/backends/kubernetes/pods.js';
import { PersistentShell } from '../../src/shell/persistent-shell.js';
import type { ShellOptions } from '../../src/shell/types.js';
import { TEST_IMAGE } from '../helpers/docker.js';
import { runningPod, sandboxInput, standinClient } from './fixtures.js';
import { StandinApiServer } from './server.js';

const ROUNDS = Number(process.argv[2] ?? 300);

function pct(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
}

function fmt(samples: number[]): string {
  return `p50 ${pct(samples, 50).toFixed(3)} ms, p90 ${pct(samples, 90).toFixed(3)} ms (n=${samples.length})`;
}

/** Round trips of `echo x` on a raw line protocol: write a line, wait for the echo. */
async function lineRoundTrips(write: (s: string) => void, output: NodeJS.ReadableStream, rounds: number): Promise<number[]> {
  let buf = '';
  let waiter: (() => void) | undefined;
  output.on('data', (c: Buffer) => {
    buf += c.toString();
    if (buf.includes('x\n')) waiter?.();
  });
  const samples: number[] = [];
  for (let i = 0; i < rounds + 20; i++) {
    buf = '';
    const t = performance.now();
    await new Promise<void>((resolve) => {
      waiter = resolve;
      write('echo x\n');
    });
    if (i >= 20) samples.push(performance.now() - t);
  }
  return samples;
}

async function berthShell(open: ShellOptions['open'], execOnce: ShellOptions['execOnce']): Promise<number[]> {
  const shell = await PersistentShell.start({
    open, execOnce,
    stateDir: STATE_DIR, shellId: `measure-${randomBytes(3).toString('hex')}`, defaultCwd: '/workspace', secretNames: [], spillDir: undefined, maxOutputChars: 100_000,
  });
  const samples: number[] = [];
  for (let i = 0; i < ROUNDS + 20; i++) {
    const t = performance.now();
    await shell.run('true', { timeoutMs: 10_000 });
    if (i >= 20) samples.push(performance.now() - t);
  }
  await shell[Symbol.asyncDispose]();
  return samples;
}

async function bareWebSocketShell(target: ExecTarget): Promise<number[]> {
  const p = await spawnInPod(target, ['bash', '--noprofile', '--norc'], { env: {}, stdin: true });
  const samples = await lineRoundTrips((s) => p.stdin.write(s), p.stdout, ROUNDS);
  await p.kill();
  return samples;
}

async function bareDockerShell(docker: Dockerode, containerId: string): Promise<number[]> {
  const exec = await docker.getContainer(containerId).exec({ Cmd: ['bash', '--noprofile', '--norc'], AttachStdin: true, AttachStdout: true, AttachStderr: true });
  const sock = (await exec.start({ hijack: true, stdin: true })) as unknown as Duplex;
  const out = new PassThrough();
  demultiplex(sock as unknown as NodeJS.ReadableStream as import('node:stream').Readable, out, new PassThrough());
  const samples = await lineRoundTrips((s) => sock.write(s), out, ROUNDS);
  sock.end('exit\n');
  return samples;
}

async function podToFirstCommand(server: StandinApiServer, rounds: number): Promise<number[]> {
  const client = standinClient(server);
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const input = sandboxInput('inst-measure');
    const t = performance.now();
    await createEphemeralPod(client, sandboxPod(input));
    await waitForRunning(client, input.name, 60_000);
    await execOnceInPod({ client, pod: input.name, container: CONTAINER_NAME }, ['true']);
    samples.push(performance.now() - t);
    await deletePod(client, input.name);
  }
  return samples;
}

async function containerToFirstCommand(docker: Dockerode, rounds: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t = performance.now();
    const c = await docker.createContainer({
      name: `berth-measure-${randomBytes(4).toString('hex')}`, Image: TEST_IMAGE, Entrypoint: [], Cmd: ['sleep', 'infinity'],
      Labels: { 'berth.k8s-standin': 'measure' }, HostConfig: { NetworkMode: 'none', Init: true },
    });
    await c.start();
    const exec = await c.exec({ Cmd: ['true'], AttachStdout: true, AttachStderr: true });
    const stream = await exec.start({ hijack: false });
    await new Promise((resolve) => { stream.on('end', resolve); stream.resume(); });
    samples.push(performance.now() - t);
    await c.remove({ force: true });
  }
  return samples;
}

const docker = new Dockerode();
const server = await StandinApiServer.start({ docker });
try {
  const client = standinClient(server);
  const target = await runningPod(client, sandboxInput('inst-measure'));
  const containerId = server.containers.get(`berth/${target.pod}`) as string;
  const berth = await berthShell(
    (env) => spawnInPod(target, ['bash', '--noprofile', '--norc'], { env, cwd: '/workspace', stdin: true }),
    (argv, o) => execOnceInPod(target, argv, o),
  );
  const bare = await bareWebSocketShell(target);
  const inContainer: ContainerTarget = { docker, containerId, track: () => () => undefined, log: Logger.silent() };
  const spawnHere = (argv: readonly string[], o: Parameters<typeof spawnInContainer>[2]) => spawnInContainer(inContainer, argv, o);
  const berthDocker = await berthShell(
    (env) => openShellVia(spawnHere, { env, cwd: '/workspace' }),
    (argv, o) => execOnce(spawnHere, argv, { timeoutMs: 10_000, ...o }, 'the measured container'),
  );
  const dockerBare = await bareDockerShell(docker, containerId);
  console.log(`persistent shell, berth protocol, over the exec WebSocket: ${fmt(berth)}`);
  console.log(`bare shell over the exec WebSocket:                         ${fmt(bare)}`);
  console.log(`persistent shell, berth protocol, over a docker attach:     ${fmt(berthDocker)}`);
  console.log(`bare shell over a docker exec attach (the stand-in's hop):  ${fmt(dockerBare)}`);
  console.log(`ratio berth / bare, WebSocket (p50): ${(pct(berth, 50) / pct(bare, 50)).toFixed(2)}x; docker attach: ${(pct(berthDocker, 50) / pct(dockerBare, 50)).toFixed(2)}x`);
  console.log(`added by the WebSocket hop (p50): berth ${(pct(berth, 50) - pct(berthDocker, 50)).toFixed(3)} ms, bare ${(pct(bare, 50) - pct(dockerBare, 50)).toFixed(3)} ms`);
  const startRounds = Math.max(5, Math.round(ROUNDS / 30));
  const pods = await podToFirstCommand(server, startRounds);
  const containers = await containerToFirstCommand(docker, startRounds);
  console.log(`new pod to first command (create, wait Running, exec):      ${fmt(pods)}`);
  console.log(`stand-in's own container start to first exec:               ${fmt(containers)}`);
  console.log(`ratio pod / container (p50): ${(pct(pods, 50) / pct(containers, 50)).toFixed(2)}x`);
} finally {
  await server.stop();
}
