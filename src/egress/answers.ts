import type { Socket } from 'node:net';
import type { ServerResponse } from 'node:http';

/*
 * What the proxy answers a sandbox when it does not pass a request on: one line that names the
 * host, the rule and who decides, so an agent reading it knows not to retry and whom to ask.
 */

/** The body of a refusal: `berth egress: evil.example:443 refused (not in egress.allow); the operator decides what this sandbox may reach`. */
export function refusalText(host: string, port: number, rule: string, detail?: string): string {
  const why = detail === undefined ? rule : `${rule}: ${detail}`;
  return `berth egress: ${hostPort(host, port)} refused (${why}); the operator decides what this sandbox may reach\n`;
}

/** The body of a 502/504: what failed on the way to the host. */
export function failureText(host: string, port: number, what: string): string {
  return `berth egress: ${hostPort(host, port)} ${what}\n`;
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

const REASONS: Record<number, string> = {
  400: 'Bad Request', 403: 'Forbidden', 407: 'Proxy Authentication Required', 501: 'Not Implemented', 502: 'Bad Gateway', 504: 'Gateway Timeout',
};

/** Answers on a raw socket (a CONNECT, which node:http hands over detached) and closes it. */
export function answerSocket(socket: Socket, status: number, body: string, headers: Readonly<Record<string, string>> = {}): void {
  if (socket.destroyed) return;
  const bytes = Buffer.from(body, 'utf8');
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  socket.end(`HTTP/1.1 ${status} ${REASONS[status] ?? 'Error'}\r\ncontent-type: text/plain; charset=utf-8\r\n${extra}` +
    `content-length: ${bytes.length}\r\nconnection: close\r\n\r\n${body}`);
}

/** Answers an HTTP request the proxy holds (plain or inside an intercepted session). */
export function answerResponse(res: ServerResponse, status: number, body: string, headers: Readonly<Record<string, string>> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { ...headers, 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** The 407 body: the sandbox's proxy credential is missing or wrong, and what to do. */
export function unauthenticatedText(what: string): string {
  return `berth egress: refused, ${what}; use the proxy URL berth put in HTTP_PROXY/HTTPS_PROXY, with its user and token\n`;
}

/** What a 407 carries besides its body (RFC 9110 §11.7.1). */
export const PROXY_AUTHENTICATE = { 'proxy-authenticate': 'Basic realm="berth egress"' } as const;

/** A TLS fatal `access_denied` alert (RFC 8446 §6.2): how a tunnel refuses after its 200. */
export const TLS_ACCESS_DENIED = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);
