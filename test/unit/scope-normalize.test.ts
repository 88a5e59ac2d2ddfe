import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { normalizeScope } from '../../src/scope/normalize.js';

describe('normalizeScope', () => {
  it('fills tenant local and profile default', () => {
    expect(normalizeScope({})).toEqual({ tenant: 'local', profile: 'default' });
  });

  it('treats empty strings as not given', () => {
    expect(normalizeScope({ tenant: '', profile: '', session: '', task: '', parentTask: '', user: '' })).toEqual({
      tenant: 'local',
      profile: 'default',
    });
  });

  it('keeps given fields and drops undefined ones', () => {
    const scope = normalizeScope({
      tenant: 'acme',
      profile: 'coder',
      session: 's 1: with anything printable ✓',
      task: 't1',
      parentTask: 'p1',
      user: 'telegram:123',
    });
    expect(scope).toEqual({
      tenant: 'acme',
      profile: 'coder',
      session: 's 1: with anything printable ✓',
      task: 't1',
      parentTask: 'p1',
      user: 'telegram:123',
    });
    expect(Object.keys(normalizeScope({ session: 's' }))).toEqual(['tenant', 'profile', 'session']);
  });

  it('returns a frozen object', () => {
    expect(Object.isFrozen(normalizeScope({ session: 's' }))).toBe(true);
  });

  it.each([
    ['tenant with a slash', { tenant: 'a/b' }, /tenant/],
    ['tenant with a colon', { tenant: 'a:b' }, /tenant/],
    ['tenant too long', { tenant: 'a'.repeat(65) }, /tenant/],
    ['profile with a space', { profile: 'my profile' }, /profile/],
    ['session too long', { session: 's'.repeat(257) }, /session.*256/],
    ['session with a newline', { session: 'a\nb' }, /session.*control/],
    ['session with DEL', { session: 'a\u007fb' }, /session.*control/],
    ['task with a C1 control', { task: 'a\u0085b' }, /task.*control/],
    ['parentTask with NUL', { task: 't', parentTask: 'a\u0000' }, /parentTask.*control/],
    ['parentTask without task', { parentTask: 'p' }, /parentTask "p" needs a task/],
    ['task as its own parent', { task: 't', parentTask: 't' }, /own parentTask/],
    ['bad user', { user: 'telegram' }, /platform:id/],
    ['task named like the default key', { task: 'default' }, /default sandbox/],
    ['task named like a user key', { task: 'user:telegram:1' }, /"user:"/],
    ['task named like a session key', { task: 'session:s1' }, /"session:"/],
    ['parent named like a shared key', { task: 't', parentTask: 'shared:k' }, /"shared:"/],
    ['non-string session', { session: 42 as unknown as string }, /strings/],
    ['workspace with a bad source', { workspace: { path: '/x', source: 'other' as 'session' } }, /source/],
  ])('refuses %s', (_what, input, message) => {
    expect(() => normalizeScope(input)).toThrow(UsageError);
    expect(() => normalizeScope(input)).toThrow(message);
  });

  it('accepts the limits', () => {
    expect(normalizeScope({ tenant: 'a'.repeat(64), session: 'é'.repeat(256) }).tenant).toHaveLength(64);
    expect(normalizeScope({ profile: 'a.b_c-D9' }).profile).toBe('a.b_c-D9');
  });

  it('treats an untagged workspace as attached by the caller and drops an empty one', () => {
    const untagged = { path: '/home/ana/app' } as unknown as { path: string; source: 'session' };
    expect(normalizeScope({ workspace: untagged }).workspace).toEqual({ path: '/home/ana/app', source: 'session' });
    expect(normalizeScope({ workspace: { path: '/x', source: 'process' } }).workspace?.source).toBe('process');
    expect(normalizeScope({ workspace: { path: '', source: 'session' } }).workspace).toBeUndefined();
  });

  it('refuses session ids starting with "@", reserved for the stand-in sessions of session-less calls', () => {
    for (const session of ['@default', '@user:telegram:1', '@task:t', '@x']) {
      expect(() => normalizeScope({ session }), session).toThrow(/reserves for calls without a session/);
    }
    expect(normalizeScope({ session: 'a@b' }).session).toBe('a@b');
  });
});
