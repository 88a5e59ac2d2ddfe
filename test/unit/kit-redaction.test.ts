import { describe, expect, it } from 'vitest';
import { ByteRedactor, heldBack, lookBackBytes, redactText, redactWindow } from '../../src/kit/redaction.js';

/*
 * The one redaction module: the streaming byte redactor (command output, file contents), the job
 * reader's window, and the string form, all over one engine.
 */

/** The 3-character pieces of `secret` found in `text`. */
function leaks(text: string, secret: string, n = 3): string[] {
  const out: string[] = [];
  for (let i = 0; i + n <= secret.length; i++) if (text.includes(secret.slice(i, i + n))) out.push(secret.slice(i, i + n));
  return out;
}

/** Adjacent markers as one: values that overlap across a cut go out as one marker on each side. */
function merged(text: string): string {
  return text.replace(/(\[REDACTED\])+/g, '[REDACTED]');
}

/** `input` through a redactor in two pieces cut at `cut`, then flushed. */
function streamed(values: string[], input: Buffer, cut: number): string {
  const r = new ByteRedactor(values);
  return Buffer.concat([r.push(input.subarray(0, cut)), r.push(input.subarray(cut)), r.flush()]).toString('utf8');
}

describe('ByteRedactor', () => {
  it('redacts values split across chunks and ignores values under 8 chars', () => {
    const input = Buffer.from('xx abcdefghij yy abcdefghij short');
    for (let cut = 0; cut <= input.length; cut++) {
      expect(streamed(['abcdefghij', 'short'], input, cut)).toBe('xx [REDACTED] yy [REDACTED] short');
    }
  });

  it('prefers the longest value at the same position', () => {
    const r = new ByteRedactor(['password', 'password-long']);
    expect(Buffer.concat([r.push(Buffer.from('a password-long b')), r.flush()]).toString()).toBe('a [REDACTED] b');
  });

  it('redacts values that overlap whole, however the stream is cut: nothing of either leaks', () => {
    const a = 'abcdefgh12';
    const b = '12ijklmnop';
    const input = Buffer.from(`x ${a.slice(0, 8)}${b} y`);
    for (let cut = 0; cut <= input.length; cut++) {
      const out = streamed([a, b], input, cut);
      expect(merged(out), `cut at ${cut}`).toBe('x [REDACTED] y');
      expect(leaks(out, a).concat(leaks(out, b))).toEqual([]);
    }
  });

  it('lets output without a value through as it came, holding back only what may begin one', () => {
    const r = new ByteRedactor(['s3cret-value']);
    expect(r.push(Buffer.from('plain line\n')).toString()).toBe('plain line\n');
    expect(r.push(Buffer.from('then s3c')).toString()).toBe('then ');
    expect(r.push(Buffer.from('ond line\n')).toString()).toBe('s3cond line\n');
    expect(r.flush().length).toBe(0);
  });

  it('without values it is a pass-through, and redacts strings as the string form does', () => {
    const none = new ByteRedactor([]);
    const chunk = Buffer.from('anything');
    expect(none.active).toBe(false);
    expect(none.push(chunk)).toBe(chunk);
    expect(new ByteRedactor(['s3cret-value']).redactString('/home/s3cret-value/x')).toBe('/home/[REDACTED]/x');
  });

  it('streams to the text the job window gives for the same bytes (one engine; a cut may split a marker in two)', () => {
    const secrets = ['S3cr3tValue-0123', 'another-secret-99', '0123another'];
    const input = Buffer.from(`a S3cr3tValue-0123another-secret-99 €b S3cr3tValue-01 c another-secret-9 S3cr3tValue-0123`);
    const whole = redactWindow(input, 0, input.length * 2, secrets, false).text;
    for (let cut = 0; cut <= input.length; cut++) expect(merged(streamed(secrets, input, cut)), `cut at ${cut}`).toBe(whole);
    for (const s of secrets) expect(whole).not.toContain(s);
    expect(whole).toBe('a [REDACTED] €b S3cr3tValue-01 c another-secret-9 [REDACTED]');
  });
});

describe('redactText', () => {
  it('replaces every occurrence of each value, longest first', () => {
    expect(redactText('k=s3cret-value-long and s3cret-value', ['s3cret-value-long', 's3cret-value'])).toBe('k=[REDACTED] and [REDACTED]');
  });
});

describe('redactWindow (a job read from an offset)', () => {
  it('never returns 3+ characters of a secret, from any offset, any size, with or without more to come', () => {
    const secret = 'S3cr3tValue-0123';
    const other = 'another-secret-99';
    const text = Buffer.from(`a${secret}${secret}b €${other}c${secret}`);
    const edge = lookBackBytes([secret, other]);
    expect(edge).toBe(other.length - 1);
    for (let offset = 0; offset <= text.length; offset++) {
      for (const maxBytes of [1, 2, 4, 9, 40, 1000]) {
        for (const more of [false, true]) {
          const from = Math.max(0, offset - edge);
          const { text: out, end } = redactWindow(text.subarray(from, offset + maxBytes + edge), offset - from, maxBytes, [secret, other], more);
          expect(leaks(out, secret).concat(leaks(out, other)), `${offset}/${maxBytes}/${more}: ${out}`).toEqual([]);
          expect(from + end).toBeGreaterThanOrEqual(offset);
        }
      }
    }
  });

  it('holds back a tail that may begin a secret while more may come, and never stops inside a character', () => {
    const secret = 'S3cr3tValue-0123';
    const partial = Buffer.from(`ok ${secret.slice(0, 9)}`);
    expect(redactWindow(partial, 0, 100, [secret], true)).toEqual({ text: 'ok ', end: 3 });
    expect(redactWindow(partial, 5, 100, [secret], true)).toEqual({ text: '', end: 5 });
    const euro = Buffer.from('a€b');
    expect(redactWindow(euro, 0, 2, [], false)).toEqual({ text: 'a', end: 1 });
    expect(redactWindow(euro, 1, 1, [], false)).toEqual({ text: '€', end: 4 });
  });
});

describe('heldBack: what the next job read completes', () => {
  it('an incomplete UTF-8 character at the end', () => {
    const e = Buffer.from('aé'); // 61 c3 a9
    expect(heldBack(e, [])).toBe(0);
    expect(heldBack(e.subarray(0, 2), [])).toBe(1);
    const euro = Buffer.from('€'); // e2 82 ac
    expect(heldBack(euro.subarray(0, 1), [])).toBe(1);
    expect(heldBack(euro.subarray(0, 2), [])).toBe(2);
    expect(heldBack(euro, [])).toBe(0);
    const emoji = Buffer.from('x🙂'); // 78 f0 9f 99 82
    expect(heldBack(emoji.subarray(0, 4), [])).toBe(3);
    expect(heldBack(emoji, [])).toBe(0);
  });

  it('the start of a secret value, so redaction sees it whole', () => {
    expect(heldBack(Buffer.from('token: s3cr'), ['s3cret-value'])).toBe(4);
    expect(heldBack(Buffer.from('token: s3cret-value'), ['s3cret-value'])).toBe(0);
    expect(heldBack(Buffer.from('nothing here'), ['s3cret-value'])).toBe(0);
  });
});
