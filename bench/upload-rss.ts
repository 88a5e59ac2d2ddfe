import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';

/*
 * Server memory under concurrent uploads (issue 8, item 9): a real `berth serve` process (the built
 * dist/), one tenant sending 12 uploads of 60 MB at once. The figure is the server process's own
 * RSS: its peak (VmHWM, reset after warm-up) and the highest VmRSS sampled every 20 ms.
 */

const BERTH_BIN = resolve(import.meta.dirname, '..', 'bin', 'berth.js');
const UPLOADS = 12;
const UPLOAD_BYTES = 60 * 1000 * 1000;
const TARGET_MB = 300;

function statusKb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

function mb(kb: number): string {
  return `${(kb / 1024).toFixed(0)} MB`;
}

function startServe(dir: string, env: NodeJS.ProcessEnv): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [BERTH_BIN, 'serve', '--port', '0'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  return new Promise((resolvePromise, reject) => {
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolvePromise({ child, url: m[1] as string });
    });
    child.once('exit', (code) => reject(new Error(`berth serve exited (${code}) before listening: ${out} ${err}`)));
  });
}

function call(url: string, token: string, method: string, path: string, body?: Buffer | string): Promise<{ status: number; text: string }> {
  return new Promise((resolvePromise, reject) => {
    const data = typeof body === 'string' ? Buffer.from(body) : body;
    const headers: Record<string, string | number> = { authorization: `Bearer ${token}` };
    if (data !== undefined) headers['content-length'] = data.length;
    if (typeof body === 'string') headers['content-type'] = 'application/json';
    const req = request(`${url}${path}`, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolvePromise({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

async function dockerAvailable(): Promise<boolean> {
  return (await dockerUnavailable()) === undefined;
}

/** 12 concurrent 60 MB uploads of one tenant: the server's peak RSS, target under 300 MB. */
export async function uploadRssBench(): Promise<void> {
  const docker = await dockerAvailable();
  const backend = docker ? 'docker' : 'local';
  console.log(`\n# berth serve memory: ${UPLOADS} concurrent uploads of ${UPLOAD_BYTES / 1e6} MB, one tenant (${backend} backend)`);
  const root = mkdtempSync(join(tmpdir(), 'berth-bench-upload-'));
  const env: NodeJS.ProcessEnv = { PATH: process.env['PATH'], HOME: process.env['HOME'], BERTH_HOME: join(root, 'home') };
  if (process.env['DOCKER_HOST']) env['DOCKER_HOST'] = process.env['DOCKER_HOST'];
  const config = {
    backend, persistent: false,
    ...(docker ? { docker: { image: IMAGE } } : { server: { allowHostBackend: true } }),
    // Room for all twelve at once: the figure is what streaming costs, not what a limit refuses.
    limits: { uploadBytesInFlight: 1024 * 1024 * 1024 },
  };
  writeFileSync(join(root, 'berth.yaml'), JSON.stringify(config));
  const made = spawnSync(process.execPath, [BERTH_BIN, 'token', 'create', '--tenant', 'bench'], { cwd: root, env, encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`berth token create failed: ${made.stderr}`);
  const token = made.stdout.trim().split('\n').pop() as string;
  const { child, url } = await startServe(root, env);
  const pid = child.pid as number;
  const sessions = Array.from({ length: UPLOADS }, (_, i) => `up-${i}`);
  try {
    // Warm-up: every session's sandbox exists before the uploads, so only the uploads are measured.
    for (const s of sessions) {
      const r = await call(url, token, 'POST', '/v1/exec', JSON.stringify({ session: s, command: 'true' }));
      if (r.status !== 200) throw new Error(`warm-up exec: HTTP ${r.status} ${r.text}`);
    }
    const idleKb = statusKb(pid, 'VmRSS');
    writeFileSync(`/proc/${pid}/clear_refs`, '5'); // resets VmHWM to the current RSS
    const data = randomBytes(UPLOAD_BYTES);
    const sha = createHash('sha256').update(data).digest('hex');
    let sampledKb = idleKb;
    const sampler = setInterval(() => {
      sampledKb = Math.max(sampledKb, statusKb(pid, 'VmRSS'));
    }, 20);
    const t0 = Date.now();
    const results = await Promise.all(sessions.map((s) =>
      call(url, token, 'PUT', `/v1/files?session=${s}&path=/workspace/blob`, data)));
    const seconds = (Date.now() - t0) / 1000;
    clearInterval(sampler);
    const peakKb = Math.max(statusKb(pid, 'VmHWM'), sampledKb);
    const ok = results.filter((r) => r.status === 201).length;
    const check = await call(url, token, 'POST', '/v1/exec', JSON.stringify({ session: sessions[0], command: 'sha256sum /workspace/blob' }));
    const landed = (JSON.parse(check.text) as { stdout?: string }).stdout?.startsWith(sha) === true;
    const refused = results.filter((r) => r.status !== 201).map((r) => `${r.status} ${r.text.slice(0, 120)}`);
    console.log(`  uploads accepted ${ok}/${UPLOADS} in ${seconds.toFixed(1)} s (${((ok * UPLOAD_BYTES) / 1e6 / seconds).toFixed(0)} MB/s); first file sha256 ${landed ? 'matches' : 'DOES NOT MATCH'}`);
    if (refused.length > 0) console.log(`  refused: ${[...new Set(refused)].join(' | ')}`);
    console.log(`  server RSS idle ${mb(idleKb)}, peak ${mb(peakKb)} (VmHWM; sampled max ${mb(sampledKb)}); peak / idle = ${(peakKb / idleKb).toFixed(1)}x; ` +
      `peak growth / bytes in flight = ${(((peakKb - idleKb) * 1024) / (UPLOADS * UPLOAD_BYTES) * 100).toFixed(1)}%`);
    console.log(`  peak RSS ${mb(peakKb)} vs target < ${TARGET_MB} MB: ${peakKb / 1024 < TARGET_MB && ok === UPLOADS && landed ? 'met' : 'MISSED'}`);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    rmSync(root, { recursive: true, force: true });
  }
}
