import { fstatSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { emptyPolicy } from '../../src/egress/policy.js';
import { EgressService, type NetnsListen } from '../../src/egress/service.js';
import type { EgressSandbox } from '../../src/egress/types.js';
import { Logger } from '../../src/logging/logger.js';

// EgressService.attach for a sandbox it serves already, given a socket passed by another process
// (a keeper whose call had served it): the socket is closed, not served a second time, and no new
// listener is opened. A real loopback server stands in for the one in the sandbox's namespace.
describe('EgressService.attach: a passed socket for a sandbox served already', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  const sandboxOf = (key: string): EgressSandbox => ({
    identity: { tenant: 'local', profile: 'default', sandboxKey: key }, policy: emptyPolicy('allowlist'), credentials: [], onDecision: () => undefined,
  });

  function service(): { svc: EgressService; listens: string[]; servers: Server[] } {
    const dir = mkdtempSync(join(tmpdir(), 'berth-egress-attach-'));
    dirs.push(dir);
    const listens: string[] = [];
    const servers: Server[] = [];
    const listen: NetnsListen = async (path) => {
      listens.push(path);
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return server;
    };
    return { svc: new EgressService({ dir, log: Logger.silent(), port: 3128, maxConnectionsPerSandbox: 8, listen }), listens, servers };
  }

  const isOpen = (fd: number): boolean => {
    try {
      fstatSync(fd);
      return true;
    } catch {
      return false;
    }
  };

  it('closes the passed descriptor and keeps the listener it has when the namespace is the same', async () => {
    const { svc, listens, servers } = service();
    try {
      await svc.attach('ref-1', { path: '/proc/1/ns/net', ns: 'net:[4026531840]' }, sandboxOf('a'));
      const passed = openSync('/dev/null', 'r');
      await svc.attach('ref-1', { path: '/proc/2/ns/net', ns: 'net:[4026531840]' }, sandboxOf('a'), passed);
      expect(isOpen(passed)).toBe(false);
      expect(listens).toEqual(['/proc/1/ns/net']);
      expect(servers[0]!.listening).toBe(true);
    } finally {
      await svc.close();
    }
  });

  it('a sandbox in a new namespace gets a new listener and the old one goes', async () => {
    const { svc, listens, servers } = service();
    try {
      await svc.attach('ref-1', { path: '/proc/1/ns/net', ns: 'net:[4026531840]' }, sandboxOf('a'));
      await svc.attach('ref-1', { path: '/proc/3/ns/net', ns: 'net:[4026532999]' }, sandboxOf('a'));
      expect(listens).toEqual(['/proc/1/ns/net', '/proc/3/ns/net']);
      expect(servers[0]!.listening).toBe(false);
      expect(servers[1]!.listening).toBe(true);
    } finally {
      await svc.close();
    }
  });
});
