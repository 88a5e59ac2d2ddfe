import { statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { EgressCredential } from '../../src/egress/credentials.js';
import { rewriteHeaders, strayPlaceholder } from '../../src/egress/placeholder-swap.js';
import { openPlaceholderSecret, placeholderFor } from '../../src/egress/placeholders.js';
import { tempDir } from '../helpers/temp-dir.js';

const secret = Buffer.alloc(32, 7);
const gh: EgressCredential = { name: 'GITHUB_TOKEN', value: 'ghp_realvalue123', placeholder: placeholderFor(secret, 'd1', 'GITHUB_TOKEN'), hosts: ['api.github.com', 'github.com'] };
const npm: EgressCredential = {
  name: 'NPM_TOKEN', value: 'npm_real', placeholder: placeholderFor(secret, 'd1', 'NPM_TOKEN'), hosts: ['*.npmjs.org'],
  inject: { header: 'Authorization', value: 'Bearer {value}' },
};
const basic = (user: string, pass: string) => `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}`;

describe('placeholderFor', () => {
  it('is deterministic per (secret, sandbox, name), distinct otherwise, and safe in headers, URLs and Basic', () => {
    const p = placeholderFor(secret, 'd1', 'GITHUB_TOKEN');
    expect(p).toMatch(/^berth-ph-[0-9a-f]{32}$/);
    expect(placeholderFor(secret, 'd1', 'GITHUB_TOKEN')).toBe(p);
    expect(placeholderFor(secret, 'd2', 'GITHUB_TOKEN')).not.toBe(p);
    expect(placeholderFor(secret, 'd1', 'OTHER')).not.toBe(p);
    expect(placeholderFor(Buffer.alloc(32, 8), 'd1', 'GITHUB_TOKEN')).not.toBe(p);
    expect(encodeURIComponent(p)).toBe(p);
  });

  it('keeps its secret 0600 in a 0700 dir, and the same one across opens (a restarted berth)', () => {
    const dir = join(tempDir(), 'egress');
    const a = openPlaceholderSecret(dir);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'placeholder.key')).mode & 0o777).toBe(0o600);
    expect(openPlaceholderSecret(dir).equals(a)).toBe(true);
  });
});

describe('rewriteHeaders', () => {
  it('swaps a placeholder for its value on its own hosts, anywhere in a header', () => {
    const r = rewriteHeaders(['Authorization', `Bearer ${gh.placeholder}`, 'X-Other', `a ${gh.placeholder} b`, 'Accept', '*/*'], 'api.github.com', [gh, npm]);
    expect(r).toEqual({ ok: true, headers: { Authorization: 'Bearer ghp_realvalue123', 'X-Other': 'a ghp_realvalue123 b', Accept: '*/*' }, credentials: ['GITHUB_TOKEN'] });
  });

  it('swaps inside Authorization: Basic (git\'s https://x-access-token:$TOKEN@host/)', () => {
    const r = rewriteHeaders(['Authorization', basic('x-access-token', gh.placeholder)], 'github.com', [gh]);
    expect(r).toEqual({ ok: true, headers: { Authorization: basic('x-access-token', 'ghp_realvalue123') }, credentials: ['GITHUB_TOKEN'] });
    const asUser = rewriteHeaders(['authorization', basic(gh.placeholder, 'x-oauth-basic')], 'github.com', [gh]);
    expect(asUser).toMatchObject({ ok: true, headers: { authorization: basic('ghp_realvalue123', 'x-oauth-basic') } });
  });

  it('refuses a placeholder on its way to another host, in plain or Basic form, naming the credential', () => {
    expect(rewriteHeaders(['Authorization', `Bearer ${gh.placeholder}`], 'evil.example', [gh])).toEqual({ ok: false, credential: 'GITHUB_TOKEN' });
    expect(rewriteHeaders(['Authorization', basic('x', gh.placeholder)], 'evil.example', [gh])).toEqual({ ok: false, credential: 'GITHUB_TOKEN' });
    // Another credential's host is another host too.
    expect(rewriteHeaders(['X-Token', npm.placeholder], 'api.github.com', [gh, npm])).toEqual({ ok: false, credential: 'NPM_TOKEN' });
  });

  it('injects a configured header on its hosts only, replacing what the sandbox sent', () => {
    expect(rewriteHeaders(['authorization', 'Bearer forged', 'Accept', 'x'], 'registry.npmjs.org', [npm])).toEqual({
      ok: true, headers: { Accept: 'x', Authorization: 'Bearer npm_real' }, credentials: ['NPM_TOKEN'],
    });
    expect(rewriteHeaders(['Accept', 'x'], 'npmjs.org', [npm])).toEqual({ ok: true, headers: { Accept: 'x' }, credentials: [] });
  });

  it('drops hop-by-hop headers and the ones Connection names', () => {
    const r = rewriteHeaders(['Proxy-Authorization', 'Basic eA==', 'Connection', 'keep-alive, X-Hop', 'X-Hop', '1', 'Keep-Alive', '5', 'X-Keep', '1'], 'github.com', [gh]);
    expect(r).toEqual({ ok: true, headers: { 'X-Keep': '1' }, credentials: [] });
  });

  it('keeps repeated headers', () => {
    expect(rewriteHeaders(['Cookie', 'a=1', 'Cookie', 'b=2'], 'github.com', [gh])).toMatchObject({ headers: { Cookie: ['a=1', 'b=2'] } });
  });
});

describe('strayPlaceholder', () => {
  it('finds a placeholder of a credential that may not go to the host (a CONNECT target, a request line)', () => {
    expect(strayPlaceholder(`${gh.placeholder}.evil.example:443`, `${gh.placeholder}.evil.example`, [gh])?.name).toBe('GITHUB_TOKEN');
    expect(strayPlaceholder(`/x?t=${gh.placeholder}`, 'evil.example', [gh])?.name).toBe('GITHUB_TOKEN');
    expect(strayPlaceholder(`/x?t=${gh.placeholder}`, 'api.github.com', [gh])).toBeUndefined();
    expect(strayPlaceholder('/x', 'evil.example', [gh])).toBeUndefined();
  });
});
