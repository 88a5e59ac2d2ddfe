import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { encodeKill, encodeSpawn } from '../../src/backends/bwrap/init-script.js';
import { parseExitStatus, parseInitEvent, readInitEvents, type InitEvent } from '../../src/backends/bwrap/init-events.js';

describe('init loop requests', () => {
  it('encodes a spawn as NUL-terminated fields, values as given', () => {
    const buf = encodeSpawn({ id: 'ab12', cwd: '/workspace', stdin: 'pipe', argv: ['bash', '-c', 'echo "x y"\n'], env: { A: 'multi\nline', B: '' } });
    expect(buf.toString('utf8').split('\0')).toEqual(['spawn', 'ab12', '/workspace', 'pipe', '3', 'bash', '-c', 'echo "x y"\n', '2', 'A=multi\nline', 'B=', '']);
  });

  it('refuses what no process can be given: bad names, bash readonly names, NUL bytes, an empty argv', () => {
    const base = { id: 'a', cwd: '/', stdin: 'pipe' as const, argv: ['true'] };
    expect(() => encodeSpawn({ ...base, env: { 'A B': 'x' } })).toThrow(/"A B" cannot be given/);
    expect(() => encodeSpawn({ ...base, env: { '1A': 'x' } })).toThrow(/cannot be given/);
    expect(() => encodeSpawn({ ...base, env: { SHELLOPTS: 'x' } })).toThrow(/readonly/);
    expect(() => encodeSpawn({ ...base, env: { A: 'x\0y' } })).toThrow(/NUL/);
    expect(() => encodeSpawn({ ...base, argv: [], env: {} })).toThrow(/needs a program/);
  });

  it('encodes a kill', () => {
    expect(encodeKill(42, 'KILL').toString()).toBe('kill\x0042\x00KILL\x00');
  });
});

describe('init loop events', () => {
  it('reads an exit status only as the wrapper writes it; anything else is unknown', () => {
    expect(parseExitStatus('0\n')).toBe(0);
    expect(parseExitStatus('137\n')).toBe(137);
    for (const junk of ['', '0', '256\n', '12\n3\n', '-1\n', 'x\n']) expect(parseExitStatus(junk), junk).toBeNull();
  });

  it('parses the four events and nothing else', () => {
    expect(parseInitEvent('R')).toEqual({ kind: 'ready' });
    expect(parseInitEvent('P ab12 17')).toEqual({ kind: 'started', id: 'ab12', pid: 17 });
    expect(parseInitEvent('E ab12 cwd')).toEqual({ kind: 'failed', id: 'ab12', what: 'cwd' });
    for (const junk of ['P ab12 1', 'P ab12 0', 'X ab12 0', 'P ab/12 5', 'Q ab 1', 'P ab12 5 extra', '', 'R ']) {
      expect(parseInitEvent(junk), junk).toBeUndefined();
    }
  });

  it('drops over-long lines whatever arrives, and keeps reading after them', async () => {
    const s = new PassThrough();
    const seen: InitEvent[] = [];
    readInitEvents(s, (e) => seen.push(e));
    s.write('P aa 5\nE aa ');
    s.write('cwd\n');
    s.write('P bb 7' + 'x'.repeat(100_000));
    s.write('more without newline'.repeat(1000));
    s.write('\nP cc 9\n');
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual([
      { kind: 'started', id: 'aa', pid: 5 },
      { kind: 'failed', id: 'aa', what: 'cwd' },
      { kind: 'started', id: 'cc', pid: 9 },
    ]);
  });
});
