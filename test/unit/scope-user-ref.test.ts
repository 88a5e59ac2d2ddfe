import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { formatUserRef, parseUserRef } from '../../src/scope/user-ref.js';

describe('parseUserRef', () => {
  it('splits at the first colon', () => {
    expect(parseUserRef('telegram:123456789')).toEqual({ platform: 'telegram', id: '123456789' });
    expect(parseUserRef('matrix:@ana:example.org')).toEqual({ platform: 'matrix', id: '@ana:example.org' });
    expect(parseUserRef('whatsapp:+15551234567')).toEqual({ platform: 'whatsapp', id: '+15551234567' });
  });

  it('accepts unicode ids and the limits of both parts', () => {
    expect(parseUserRef('slack:Ünïcødé-✓').id).toBe('Ünïcødé-✓');
    expect(parseUserRef(`${'a'.repeat(32)}:${'x'.repeat(128)}`).id).toHaveLength(128);
    expect(parseUserRef(`p:${'é'.repeat(128)}`).id).toHaveLength(128);
  });

  it.each([
    ['no colon', '123456789'],
    ['empty platform', ':123'],
    ['uppercase platform', 'Telegram:123'],
    ['platform with punctuation', 'tele-gram:123'],
    ['platform too long', `${'a'.repeat(33)}:1`],
    ['empty id', 'telegram:'],
    ['id too long', `telegram:${'1'.repeat(129)}`],
    ['space in id', 'telegram:12 34'],
    ['tab in id', 'telegram:12\t34'],
    ['newline in id', 'telegram:12\n'],
    ['no-break space in id', 'telegram:12\u00a034'],
    ['control char in id', 'telegram:12\u0007'],
    ['zero-width joiner in id', 'telegram:12\u200d34'],
    ['lone surrogate in id', 'telegram:12\ud800'],
    ['slash in id', 'telegram:a/b'],
    ['backslash in id', 'telegram:a\\b'],
    ['dot id', 'telegram:.'],
    ['dot-dot id', 'telegram:..'],
  ])('refuses %s with the expected form', (_what, ref) => {
    expect(() => parseUserRef(ref)).toThrow(UsageError);
    expect(() => parseUserRef(ref)).toThrow(/platform:id.*telegram:123456789/);
  });

  it('round-trips through formatUserRef', () => {
    expect(formatUserRef(parseUserRef('discord:a:b'))).toBe('discord:a:b');
  });
});
