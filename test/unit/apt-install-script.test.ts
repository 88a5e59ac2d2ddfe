import { spawnSync } from 'node:child_process';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * scripts/apt-install.sh, which the demo and CI use: one line on stderr saying what and why,
 * apt's own chatter in a log file. apt-get is a stand-in that prints what apt prints, so the test
 * installs nothing.
 */

function fakeApt(dir: string, exitCode: number): void {
  const lines = Array.from({ length: 45 }, (_, i) => `echo "Get:${i} http://deb.debian.org/debian bookworm/main pkg${i}"`).join('\n');
  writeFileSync(join(dir, 'apt-get'), `#!/bin/sh\n${lines}\necho "apt-get $*" >&2\nexit ${exitCode}\n`);
  chmodSync(join(dir, 'apt-get'), 0o755);
}

function run(dir: string): { status: number | null; stdout: string; stderr: string; log: string } {
  const log = join(dir, 'apt.log');
  const r = spawnSync('bash', [join(REPO, 'scripts/apt-install.sh'), 'to build the sandbox image', 'debootstrap'], {
    env: { PATH: `${dir}:${process.env['PATH']}`, BERTH_APT_LOG: log }, encoding: 'utf8',
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, log: readFileSync(log, 'utf8') };
}

describe('scripts/apt-install.sh', () => {
  it('prints one line naming the packages, the reason and the log; apt\'s output goes to the log', () => {
    const dir = tempDir('berth-apt-');
    fakeApt(dir, 0);
    const r = run(dir);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`installing debootstrap (to build the sandbox image); apt's output: ${join(dir, 'apt.log')}\n`);
    expect(r.log.split('\n').filter((l) => l.startsWith('Get:'))).toHaveLength(90);
  });

  it('when apt fails, says so and shows the end of the log', () => {
    const dir = tempDir('berth-apt-');
    fakeApt(dir, 100);
    const r = run(dir);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('apt-get could not install debootstrap');
    expect(r.stderr).toContain('apt-get update -qq');
  });
});
