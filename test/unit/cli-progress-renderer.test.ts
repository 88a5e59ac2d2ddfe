import { describe, expect, it } from 'vitest';
import { formatBytes, progressRenderer } from '../../src/cli/progress-renderer.js';

/* The progress of `berth image build` as a terminal shows it, from the lines a real minimal build writes. */

const BUILD_LINES = [
  'downloading busybox-static bash-static (apt-get download)',
  'Get:1 http://deb.debian.org/debian bookworm/main amd64 bash-static amd64 5.2.15-2+b13 [1079 kB]',
  'Get:2 http://deb.debian.org/debian bookworm/main amd64 busybox-static amd64 1:1.35.0-4+deb12u1+b1 [928 kB]',
  'Fetched 2008 kB in 1s (2868 kB/s)',
  'unpacking bash-static_5.2.15-2+b13_amd64.deb',
  'linked 268 busybox applets',
  'importing minimal rootfs as berth-sandbox:minimal',
  'import: sha256:2a4410c256fadbc4ae1dbf92e2677bbba88a92edb839eb87948716f76092bfde',
  'built berth-sandbox:minimal (2a4410c256fa) in 9.3 s',
];

function render(lines: readonly string[], columns: number | undefined): string {
  let out = '';
  const r = progressRenderer({ write: (s) => (out += s), columns });
  for (const l of lines) r.line(l);
  r.done();
  return out;
}

/** What a terminal ends up showing: each `\r\x1b[2K` clears the line being written. */
function screen(raw: string): string[] {
  return raw.split('\n').map((line) => line.split('\r\x1b[2K').at(-1) ?? '');
}

describe('progress renderer', () => {
  it('not a terminal: writes nothing at all', () => {
    expect(render(BUILD_LINES, undefined)).toBe('');
  });

  it('on a terminal: one line per step, numbered, rewritten in place with the bytes fetched and the latest detail', () => {
    const raw = render(BUILD_LINES, 200);
    expect(screen(raw)).toEqual([
      '[1] downloading busybox-static bash-static (apt-get download) · 2.0 MB fetched · Fetched 2008 kB in 1s (2868 kB/s)',
      '[2] unpacking bash-static_5.2.15-2+b13_amd64.deb · 2.0 MB fetched',
      '[3] linked 268 busybox applets · 2.0 MB fetched',
      '[4] importing minimal rootfs as berth-sandbox:minimal · 2.0 MB fetched · import: sha256:2a4410c256fadbc4ae1dbf92e2677bbba88a92edb839eb87948716f76092bfde',
      '[5] built berth-sandbox:minimal (2a4410c256fa) in 9.3 s · 2.0 MB fetched',
      '',
    ]);
    // The first step's line was drawn three times: bare, after each Get, after Fetched.
    expect(raw.split('\n')[0]!.split('\r\x1b[2K').filter((s) => s !== '')).toEqual([
      '[1] downloading busybox-static bash-static (apt-get download)',
      '[1] downloading busybox-static bash-static (apt-get download) · 1.1 MB fetched · Get:1 http://deb.debian.org/debian bookworm/main amd64 bash-static amd64 5.2.15-2+b13 [1079 kB]',
      '[1] downloading busybox-static bash-static (apt-get download) · 2.0 MB fetched · Get:2 http://deb.debian.org/debian bookworm/main amd64 busybox-static amd64 1:1.35.0-4+deb12u1+b1 [928 kB]',
      '[1] downloading busybox-static bash-static (apt-get download) · 2.0 MB fetched · Fetched 2008 kB in 1s (2868 kB/s)',
    ]);
  });

  it('fits the terminal width and neutralises control characters a tool wrote', () => {
    const raw = render(['importing x', 'import: \x1b[31mred\x07 bell and a very long tail that does not fit'], 30);
    for (const shown of screen(raw)) expect(shown.length).toBeLessThanOrEqual(29);
    expect(screen(raw)[0]).toBe('[1] importing x · import: ?[…');
    const withoutClears = raw.split('\r\x1b[2K').join('');
    expect(withoutClears.includes('\x1b') || withoutClears.includes('\x07')).toBe(false);
  });

  it('neutralises what terminalText does (as berth top and berth audit): C1 controls (a one-byte CSI) and bidi overrides too', () => {
    const raw = render(['step', 'import: \x9b2J cleared \u202eesrever\u202c and DEL\x7f'], 200);
    expect(screen(raw)[0]).toBe('[1] step · import: ?2J cleared ?esrever? and DEL?');
  });

  it('formats bytes in SI units', () => {
    expect([formatBytes(999), formatBytes(2008000), formatBytes(1.5e9)]).toEqual(['999 B', '2.0 MB', '1.5 GB']);
  });
});
