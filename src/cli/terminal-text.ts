/**
 * Text an agent or a caller chose (a command line, a session id), made safe to print on an
 * operator's terminal: control characters (escape sequences that move the cursor, retitle the
 * window or rewrite the screen; C1 controls; DEL; the bidirectional overrides that make text read
 * differently from what it is) become `?`, and a newline becomes ` ↵ ` so one entry stays one line.
 *
 * @example
 * terminalText('ls\x1b]0;owned\x07') // → 'ls?]0;owned?'
 */
export function terminalText(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\s*\n\s*/g, ' ↵ ').replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, '?');
}
