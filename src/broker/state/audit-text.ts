/**
 * An audit command text cut to `maxChars` characters, the cut marked with how much is missing.
 * The text must already be redacted: redaction replaces a whole secret value with the marker
 * before anything is cut, so a cut can never leave a secret's first half in the log. A cut
 * never splits a UTF-16 surrogate pair.
 *
 * @example
 * capAuditText('x'.repeat(5000), 4096) // 'xxx…x… [904 more chars]' (4096 x's, then the mark)
 */
export function capAuditText(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  let keep = maxChars;
  const last = text.charCodeAt(keep - 1);
  if (last >= 0xd800 && last <= 0xdbff) keep -= 1;
  return `${text.slice(0, keep)}… [${text.length - keep} more chars]`;
}
