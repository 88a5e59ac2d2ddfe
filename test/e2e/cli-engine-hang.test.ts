import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runBerth } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * An engine socket that accepts connections and never answers. Every engine
 * request is bounded, so the CLI reports the engine as unreachable (exit 125, one line) and exits,
 * instead of staying alive on the open request.
 */

const servers: { server: Server; sockets: Set<Socket> }[] = [];
afterEach(async () => {
  for (const { server, sockets } of servers.splice(0)) {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

/** A unix socket that accepts, reads and never writes a byte. */
async function silentSocket(): Promise<{ path: string; connections: () => number }> {
  const path = join(tempDir('berth-hang-'), 'engine.sock');
  const sockets = new Set<Socket>();
  let count = 0;
  const server = createServer((c) => {
    count++;
    sockets.add(c);
    c.on('data', () => undefined);
    c.on('close', () => sockets.delete(c));
  });
  servers.push({ server, sockets });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return { path, connections: () => count };
}

describe('berth CLI against an engine that accepts and never answers', () => {
  it('exec exits 125 with one line naming the engine, and does not stay alive', async () => {
    const engine = await silentSocket();
    const dir = tempDir('berth-hang-work-');
    const home = join(dir, 'home');
    const r = await runBerth(['exec', '--', 'true'], {
      cwd: dir, env: { PATH: process.env['PATH'], HOME: process.env['HOME'], BERTH_HOME: home, DOCKER_HOST: `unix://${engine.path}` },
      // Far above the bounds (a 5 s ping); a CLI still alive here is killed and the test fails on its code.
      timeoutMs: 45_000,
    });
    expect(engine.connections()).toBeGreaterThan(0);
    expect(r.code, r.stderr).toBe(125);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `berth: docker engine at unix://${engine.path} did not answer within 5 s (asked to answer a ping); ` +
      'check that it is healthy ("docker info"), restart it, or set DOCKER_HOST to a running engine\n');
  }, 60_000);
});
