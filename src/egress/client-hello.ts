/*
 * A TLS ClientHello reader: just enough of RFC 8446 §4.1.2 / RFC 5246 §7.4.1.2 to find the
 * server name (SNI, RFC 6066 §3) a client asks for, so a tunnel whose TLS names another host
 * than its CONNECT (domain fronting) is refused before any byte goes upstream. It reads the
 * handshake across as many records as the client split it into, and refuses anything it cannot
 * read rather than guessing.
 */

/** The most bytes of records the reader waits for: a ClientHello with post-quantum key shares is ~2 KB. */
const CLIENT_HELLO_MAX_BYTES = 64 * 1024;

export type ClientHelloResult =
  /** More bytes are needed. */
  | { kind: 'partial' }
  /** Not a ClientHello berth can read: refuse the tunnel. */
  | { kind: 'invalid'; reason: string }
  /** `serverName` undefined: no SNI. `alpn`: the protocols offered, in order. */
  | { kind: 'hello'; serverName: string | undefined; alpn: string[] };

const RECORD_HANDSHAKE = 22;
const HANDSHAKE_CLIENT_HELLO = 1;
const EXT_SERVER_NAME = 0;
const EXT_ALPN = 16;
const MAX_RECORD_BODY = 16384;

/**
 * Reads the ClientHello at the start of `data` (everything the client sent so far).
 *
 * @example
 * parseClientHello(firstBytes) // { kind: 'hello', serverName: 'api.github.com', alpn: ['h2', 'http/1.1'] }
 */
export function parseClientHello(data: Buffer): ClientHelloResult {
  // Gather the handshake bytes from consecutive handshake records.
  const parts: Buffer[] = [];
  let have = 0;
  let need: number | undefined;
  let offset = 0;
  while (need === undefined || have < need) {
    if (offset + 5 > data.length) return data.length > CLIENT_HELLO_MAX_BYTES ? invalid('too long') : { kind: 'partial' };
    if (data[offset] !== RECORD_HANDSHAKE) return invalid(offset === 0 ? 'not a TLS handshake' : 'another record inside the ClientHello');
    if (data[offset + 1] !== 3) return invalid('not a TLS record version');
    const len = data.readUInt16BE(offset + 3);
    if (len === 0 || len > MAX_RECORD_BODY) return invalid('bad record length');
    if (offset + 5 + len > data.length) {
      // Judge the announced size as soon as the first record shows it, before waiting for the rest.
      if (offset === 0 && data.length >= 9) {
        if (data[5] !== HANDSHAKE_CLIENT_HELLO) return invalid('not a ClientHello');
        if (4 + data.readUIntBE(6, 3) > CLIENT_HELLO_MAX_BYTES) return invalid('too long');
      }
      return offset + 5 + len > CLIENT_HELLO_MAX_BYTES ? invalid('too long') : { kind: 'partial' };
    }
    parts.push(data.subarray(offset + 5, offset + 5 + len));
    have += len;
    offset += 5 + len;
    if (need === undefined && have >= 4) {
      const head = Buffer.concat(parts);
      if (head[0] !== HANDSHAKE_CLIENT_HELLO) return invalid('not a ClientHello');
      need = 4 + head.readUIntBE(1, 3);
      if (need > CLIENT_HELLO_MAX_BYTES) return invalid('too long');
    }
  }
  const msg = Buffer.concat(parts);
  // A record may only carry bytes of the ClientHello; anything after it is not this reader's.
  if (have > need) return invalid('data after the ClientHello in its records');
  return readBody(msg.subarray(4, need));
}

function readBody(body: Buffer): ClientHelloResult {
  const r = new Reader(body);
  r.skip(2 + 32); // legacy_version, random
  r.skip(r.u8()); // legacy_session_id
  const suites = r.u16();
  if (suites === 0 || suites % 2 !== 0) return invalid('bad cipher suites');
  r.skip(suites);
  const compressions = r.u8();
  if (compressions === 0) return invalid('bad compression methods');
  r.skip(compressions);
  if (r.failed) return invalid('truncated');
  if (r.left === 0) return { kind: 'hello', serverName: undefined, alpn: [] };
  const ext = new Reader(r.bytes(r.u16()));
  if (r.failed || r.left !== 0) return invalid('bad extensions length');
  let serverName: string | undefined;
  let alpn: string[] = [];
  const seen = new Set<number>();
  while (ext.left > 0) {
    const type = ext.u16();
    const data = ext.bytes(ext.u16());
    if (ext.failed) return invalid('truncated extension');
    // Two of one extension make a hello ambiguous (which name would the server use?).
    if (seen.has(type)) return invalid(`extension ${type} twice`);
    seen.add(type);
    if (type === EXT_SERVER_NAME) {
      const sn = readServerName(data);
      if ('problem' in sn) return invalid(sn.problem);
      serverName = sn.name;
    } else if (type === EXT_ALPN) {
      const a = readAlpn(data);
      if (a === undefined) return invalid('bad ALPN');
      alpn = a;
    }
  }
  return { kind: 'hello', serverName, alpn };
}

/** The host name in a server_name extension, or what is wrong with it. */
function readServerName(data: Buffer): { name: string } | { problem: string } {
  const r = new Reader(data);
  const list = new Reader(r.bytes(r.u16()));
  if (r.failed || r.left !== 0) return { problem: 'bad server_name' };
  let name: string | undefined;
  while (list.left > 0) {
    const type = list.u8();
    const value = list.bytes(list.u16());
    if (list.failed) return { problem: 'bad server_name' };
    if (type !== 0) continue;
    if (name !== undefined) return { problem: 'two host names' };
    if (value.length === 0 || /[^\x21-\x7e]/.test(value.toString('latin1'))) return { problem: 'a server name that is not a printable ASCII host name' };
    name = value.toString('latin1');
  }
  return name === undefined ? { problem: 'server_name without a host name' } : { name };
}

function readAlpn(data: Buffer): string[] | undefined {
  const r = new Reader(data);
  const list = new Reader(r.bytes(r.u16()));
  if (r.failed || r.left !== 0) return undefined;
  const out: string[] = [];
  while (list.left > 0) {
    const p = list.bytes(list.u8());
    if (list.failed || p.length === 0) return undefined;
    out.push(p.toString('latin1'));
  }
  return out;
}

function invalid(reason: string): ClientHelloResult {
  return { kind: 'invalid', reason };
}

/** Bounds-checked big-endian reads; once a read runs past the end, `failed` stays set. */
class Reader {
  private pos = 0;
  failed = false;

  constructor(private readonly buf: Buffer) {}

  get left(): number {
    return this.failed ? 0 : this.buf.length - this.pos;
  }

  u8(): number {
    return this.take(1)?.[0] ?? 0;
  }

  u16(): number {
    const b = this.take(2);
    return b === undefined ? 0 : b.readUInt16BE(0);
  }

  bytes(n: number): Buffer {
    return this.take(n) ?? Buffer.alloc(0);
  }

  skip(n: number): void {
    this.take(n);
  }

  private take(n: number): Buffer | undefined {
    if (this.failed || this.pos + n > this.buf.length) {
      this.failed = true;
      return undefined;
    }
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }
}
