import { connect } from 'node:net';

/*
 * HTTP/1.1 written on a raw socket, so nothing between a test and the server rewrites the target,
 * the Host or any other header.
 */

/** Writes `head` (and `body`) on a new connection; the whole answer, read until the server closes. */
export function sendRaw(port: number, head: string, body = ''): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let out = '';
    socket.on('data', (d: Buffer) => (out += d.toString('latin1')));
    socket.on('end', () => resolve(out));
    socket.on('error', reject);
    socket.write(`${head}\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
}

/** The status code of a raw answer. */
export const rawStatus = (answer: string): number => Number(/^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1]);
