import type { IncomingMessage, ServerResponse } from 'node:http';
import { answerResponse, failureText } from './answers.js';
import { forward } from './forward.js';
import { hostHeaderMatches } from './host-header.js';
import { parseTarget } from './names.js';
import { strayPlaceholder } from './placeholder-swap.js';
import type { ProxyCore } from './proxy-core.js';
import { resolveTarget } from './target.js';
import type { EgressSandbox } from './types.js';

/*
 * A plain HTTP request to the proxy (`GET http://host/path`): decided on its URL's host and port,
 * refused when its Host header names another host (a fronted request), forwarded otherwise.
 */

export async function onPlainRequest(core: ProxyCore, sandbox: EgressSandbox, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const startedMs = Date.now();
  const raw = req.url ?? '';
  const url = /^http:\/\//i.test(raw) ? safeUrl(raw) : undefined;
  const target = url === undefined ? undefined : parseTarget(url.hostname);
  if (url === undefined || target === undefined) {
    answerResponse(res, 400, 'berth egress: this is an HTTP proxy: send plain HTTP as "GET http://host/path" and HTTPS as "CONNECT host:443"\n');
    return;
  }
  const host = target.kind === 'name' ? target.name : target.text;
  const port = url.port === '' ? 80 : Number(url.port);
  const at = { host, port, channel: 'http' as const, startedMs };
  if (!hostHeaderMatches(req.headers.host, host, port, 80)) {
    const detail = `the Host header names ${(req.headers.host ?? '(nothing)').slice(0, 100)}`;
    core.refuse(sandbox, { ...at, rule: 'host mismatch', detail }, res);
    return;
  }
  // Credentials never go over plain HTTP: any placeholder in the request line is a stray one.
  const stray = strayPlaceholder(raw, '', sandbox.credentials);
  if (stray !== undefined) {
    core.refuse(sandbox, { ...at, rule: 'exfiltration', detail: `a placeholder of ${stray.name}` }, res);
    return;
  }
  let resolved;
  try {
    resolved = await resolveTarget(sandbox.policy, target, port, 'http', core.denied, core.lookup);
  } catch (e) {
    const what = `cannot be looked up (${(e as Error).message})`;
    const status = (e as NodeJS.ErrnoException).code === 'ETIMEOUT' ? 504 : 502;
    answerResponse(res, status, failureText(host, port, what));
    core.report(sandbox, { timeMs: startedMs, host, port, channel: 'http', allowed: false, rule: 'lookup failed', detail: what, bytesUp: 0, bytesDown: 0, credentials: [], status });
    return;
  }
  if (!resolved.decision.allowed) {
    core.refuse(sandbox, { ...at, rule: resolved.decision.rule, detail: resolved.decision.detail }, res);
    return;
  }
  forward(core, sandbox, req, res, { scheme: 'http', host, port, addresses: resolved.addresses, rule: resolved.decision.rule, channel: 'http', startedMs });
}

function safeUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}
