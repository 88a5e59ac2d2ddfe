import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type RequestListener, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join, normalize } from 'node:path';
import { EgressCa } from '../../src/egress/ca.js';
import { createTestNet, type TestNet } from './netns.js';

/*
 * Test hosts for egress through the broker: HTTPS and HTTP echo servers on public-looking
 * addresses in a network namespace (netns.ts), with certificates of a test CA of their own that
 * the proxy is told to trust (`egressProxy.upstreamCaFile: caFile`). Names map to addresses
 * through a profile's `egress.hosts`.
 */

/** What a test server saw of one request. */
export interface Seen { host: string | undefined; url: string | undefined; authorization: string | undefined }

export interface EgressHosts {
  net: TestNet;
  /** `api.egress.test` (HTTPS and HTTP), `other.egress.test` (HTTPS and HTTP), `evil.egress.test` (HTTPS). */
  addresses: { api: string; other: string; evil: string };
  /** The test CA's certificate, for `egressProxy.upstreamCaFile`. */
  caFile: string;
  seen: Seen[];
  /** `egress.hosts` for the three names. */
  hostsEntry(): Record<string, string>;
  close(): Promise<void>;
}

/** A bare repository with one commit under `root/repo.git`, ready for dumb HTTP. */
function makeRepo(root: string): void {
  const env = { PATH: process.env['PATH']!, HOME: root, GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@x', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@x' };
  const src = join(root, 'src');
  mkdirSync(src);
  const git = (args: string[], cwd: string) => execFileSync('git', args, { cwd, env, stdio: 'ignore' });
  git(['init', '-q', '-b', 'main'], src);
  writeFileSync(join(src, 'README'), 'hello from the test repo\n');
  git(['add', 'README'], src);
  git(['-c', 'commit.gpgsign=false', 'commit', '-qm', 'first'], src);
  git(['clone', '-q', '--bare', src, join(root, 'repo.git')], root);
  git(['update-server-info'], join(root, 'repo.git'));
}

/**
 * Answers with what it saw; under /repo.git/ it serves the test repository as dumb HTTP to a
 * request with Basic `x-access-token:<gitToken>` only (401 otherwise, as GitHub does).
 */
function echo(seen: Seen[], repoRoot: string, gitToken: string | undefined): RequestListener {
  const want = gitToken === undefined ? undefined : `Basic ${Buffer.from(`x-access-token:${gitToken}`).toString('base64')}`;
  return (req: IncomingMessage, res) => {
    seen.push({ host: req.headers.host, url: req.url, authorization: req.headers.authorization });
    if (want !== undefined && (req.url ?? '').startsWith('/repo.git/')) {
      req.resume();
      if (req.headers.authorization !== want) {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="git"' });
        res.end();
        return;
      }
      try {
        const body = readFileSync(join(repoRoot, normalize(decodeURIComponent((req.url ?? '/').split('?')[0]!))));
        res.writeHead(200, { 'content-length': body.length });
        res.end(body);
      } catch {
        res.writeHead(404);
        res.end();
      }
      return;
    }
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      // A careless credential host that echoes the request's Authorization header back: the real value then reaches the sandbox.
      if (req.url === '/echo-authorization') res.end(`${req.headers.authorization ?? ''}\n`);
      else res.end(`hello from ${req.headers.host ?? '?'}\n`);
    });
  };
}

/** `gitToken`: the value the test repository at https://api.egress.test/repo.git wants (Basic x-access-token). */
export async function createEgressHosts(opts: { gitToken?: string } = {}): Promise<EgressHosts> {
  const net = await createTestNet(3);
  const [api, other, evil] = net.addresses as [string, string, string];
  const dir = mkdtempSync(join(tmpdir(), 'berth-egress-hosts-'));
  const ca = await EgressCa.open(join(dir, 'upstream-ca'));
  const caFile = join(dir, 'upstream-ca.pem');
  writeFileSync(caFile, ca.certPem);
  const seen: Seen[] = [];
  if (opts.gitToken !== undefined) makeRepo(dir);
  const servers: HttpServer[] = [];
  const serve = async (ip: string, port: number, name?: string): Promise<void> => {
    const server = name === undefined ? createHttpServer(echo(seen, dir, opts.gitToken))
      : createHttpsServer(await ca.leafFor(name).then((l) => ({ key: l.keyPem, cert: l.certPem })), echo(seen, dir, opts.gitToken));
    const handle = await net.listen(ip, port);
    await new Promise<void>((resolve) => server.listen(handle, () => resolve()));
    servers.push(server);
  };
  await serve(api, 443, 'api.egress.test');
  await serve(api, 80);
  await serve(other, 443, 'other.egress.test');
  await serve(other, 80);
  await serve(evil, 443, 'evil.egress.test');
  return {
    net, addresses: { api, other, evil }, caFile, seen,
    hostsEntry: () => ({ 'api.egress.test': api, 'other.egress.test': other, 'evil.egress.test': evil }),
    close: async () => {
      for (const s of servers) s.close();
      await net.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
