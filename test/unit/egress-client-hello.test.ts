import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseClientHello } from '../../src/egress/client-hello.js';

/* ClientHellos captured from this host's node, openssl s_client and curl (all asking for api.github.com). */
const FIXTURES = join(import.meta.dirname, '../fixtures/egress');
const hello = (client: string): Buffer => Buffer.from(readFileSync(join(FIXTURES, `client-hello-${client}.hex`), 'utf8').replace(/\s+/g, ''), 'hex');

/** The same handshake message split into records of at most `size` bytes of body each. */
function refragment(record: Buffer, size: number): Buffer {
  const body = record.subarray(5, 5 + record.readUInt16BE(3));
  const out: Buffer[] = [];
  for (let i = 0; i < body.length; i += size) {
    const part = body.subarray(i, i + size);
    const head = Buffer.from([0x16, 0x03, 0x01, 0, 0]);
    head.writeUInt16BE(part.length, 3);
    out.push(head, part);
  }
  return Buffer.concat(out);
}

/** A minimal ClientHello with the given extensions (type, data). */
function synthetic(extensions: Array<[number, Buffer]>): Buffer {
  const ext = Buffer.concat(extensions.map(([t, d]) => {
    const h = Buffer.alloc(4);
    h.writeUInt16BE(t, 0);
    h.writeUInt16BE(d.length, 2);
    return Buffer.concat([h, d]);
  }));
  const extLen = Buffer.alloc(2);
  extLen.writeUInt16BE(ext.length);
  const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32), Buffer.from([0]), Buffer.from([0, 2, 0x13, 0x01]), Buffer.from([1, 0]), extLen, ext]);
  const hs = Buffer.concat([Buffer.from([1, 0, (body.length >> 8) & 0xff, body.length & 0xff]), body]);
  const rec = Buffer.from([0x16, 3, 1, 0, 0]);
  rec.writeUInt16BE(hs.length, 3);
  return Buffer.concat([rec, hs]);
}

function sniExtension(...names: string[]): Buffer {
  const entries = Buffer.concat(names.map((n) => {
    const b = Buffer.from(n, 'latin1');
    return Buffer.concat([Buffer.from([0, b.length >> 8, b.length & 0xff]), b]);
  }));
  return Buffer.concat([Buffer.from([entries.length >> 8, entries.length & 0xff]), entries]);
}

describe('parseClientHello', () => {
  it.each(['node', 'openssl', 'curl'])('reads the server name and ALPN of a real %s ClientHello', (client) => {
    const r = parseClientHello(hello(client));
    expect(r.kind).toBe('hello');
    if (r.kind !== 'hello') return;
    expect(r.serverName).toBe('api.github.com');
    expect(r.alpn).toContain('http/1.1');
  });

  it.each(['node', 'openssl', 'curl'])('asks for more bytes at every prefix of the %s ClientHello, never misreads one', (client) => {
    const full = hello(client);
    for (let n = 0; n < full.length; n++) expect(parseClientHello(full.subarray(0, n)).kind, `prefix ${n}`).toBe('partial');
  });

  it('reads a ClientHello fragmented across records (1, 7 and 100 bytes each), in any chunking', () => {
    for (const size of [1, 7, 100]) {
      const frag = refragment(hello('curl'), size);
      const r = parseClientHello(frag);
      expect(r.kind === 'hello' && r.serverName).toBe('api.github.com');
      expect(parseClientHello(frag.subarray(0, frag.length - 1)).kind).toBe('partial');
    }
  });

  it('refuses garbage, plain HTTP and SSLv2-style hellos', () => {
    expect(parseClientHello(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')).kind).toBe('invalid');
    expect(parseClientHello(Buffer.from([0x80, 0x2e, 0x01, 0x03, 0x01])).kind).toBe('invalid');
    expect(parseClientHello(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x00])).kind).toBe('invalid');
    // A handshake record that is not a ClientHello (a ServerHello, type 2).
    const notHello = hello('node');
    notHello[5] = 2;
    expect(parseClientHello(notHello)).toMatchObject({ kind: 'invalid', reason: 'not a ClientHello' });
  });

  it('refuses an application-data record in the middle of a fragmented hello', () => {
    const frag = refragment(hello('node'), 100);
    frag[105] = 0x17;
    expect(parseClientHello(frag).kind).toBe('invalid');
  });

  it('refuses lengths that run past their container', () => {
    const r = hello('openssl');
    // Lengthen the extensions block's length by one.
    const bad = Buffer.from(r);
    const sessionLen = bad[5 + 4 + 34]!;
    const suitesAt = 5 + 4 + 35 + sessionLen;
    const suites = bad.readUInt16BE(suitesAt);
    const compAt = suitesAt + 2 + suites;
    const extAt = compAt + 1 + bad[compAt]!;
    bad.writeUInt16BE(bad.readUInt16BE(extAt) + 1, extAt);
    expect(parseClientHello(bad).kind).toBe('invalid');
  });

  it('reads no server name when there is none, and refuses two host names or two SNI extensions', () => {
    expect(parseClientHello(synthetic([]))).toEqual({ kind: 'hello', serverName: undefined, alpn: [] });
    expect(parseClientHello(synthetic([[0, sniExtension('a.example')]]))).toMatchObject({ serverName: 'a.example' });
    expect(parseClientHello(synthetic([[0, sniExtension('a.example', 'b.example')]]))).toMatchObject({ kind: 'invalid', reason: 'two host names' });
    expect(parseClientHello(synthetic([[0, sniExtension('a.example')], [0, sniExtension('b.example')]]))).toMatchObject({ kind: 'invalid' });
    expect(parseClientHello(synthetic([[0, sniExtension('a.exa\nmple')]]))).toMatchObject({ kind: 'invalid' });
  });

  it('gives up on a hello announced larger than the bound instead of buffering it', () => {
    const big = Buffer.from([0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0xff, 0xff, 0xff]);
    expect(parseClientHello(big)).toMatchObject({ kind: 'invalid', reason: 'too long' });
  });
});
