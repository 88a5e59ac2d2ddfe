import { describe, expect, it } from 'vitest';
import { capAuditText } from '../../src/broker/state/audit-text.js';

describe('capAuditText', () => {
  it('keeps a text of at most maxChars as it is', () => {
    expect(capAuditText('abc', 3)).toBe('abc');
    expect(capAuditText('', 64)).toBe('');
  });

  it('cuts after maxChars and says how many characters are missing', () => {
    expect(capAuditText('abcdef', 4)).toBe('abcd… [2 more chars]');
  });

  it('never splits a surrogate pair', () => {
    const text = `abc${'😀'}def`;
    expect(capAuditText(text, 4)).toBe('abc… [5 more chars]');
    expect(capAuditText(text, 5)).toBe('abc😀… [3 more chars]');
  });
});
