import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BERTH_BIN, runBerth, tempInstall } from '../helpers/cli.js';

const LOCAL = 'backend: local\npersistent: false\n';

/** Runs the real CLI with its stdout on a pipe whose reading end is closed at once (`| head -c 0`). */
function runWithClosedStdout(args: string[], t: { env: NodeJS.ProcessEnv; dir: string }): Promise<{ code: number | null; signal: string | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BERTH_BIN, ...args], { cwd: t.dir, env: t.env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stderr });
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/*
 * `berth exec … | head -c 0`: a closed stdout ends the call quietly, without an EPIPE stack
 * trace: the command is cancelled (as SIGPIPE ends a writer in a pipeline), nothing more is
 * printed, and the exit code is 141 (128 + SIGPIPE).
 */
describe('berth exec with its stdout closed (local backend, real processes)', () => {
  it('streaming: cancels the command, exits 141 without a stack trace, the session goes on', async () => {
    using t = tempInstall(LOCAL);
    const marker = join(t.dir, 'after-sleep');
    const r = await runWithClosedStdout(['exec', '--session', 'p', '--', `echo first; sleep 3; touch ${marker}; echo second`], t);
    expect(r.stderr).not.toMatch(/EPIPE|Error|\n\s+at /);
    expect(r.stderr).toBe('');
    expect(r).toMatchObject({ code: 141, signal: null });
    await sleep(3_500);
    expect(existsSync(marker)).toBe(false);
    expect(await runBerth(['exec', '--session', 'p', '--', 'echo ok'], { env: t.env, cwd: t.dir })).toMatchObject({ code: 0, stdout: 'ok\n' });
  });

  it('--json: the one line finds the pipe closed; still no stack trace, exit 141', async () => {
    using t = tempInstall(LOCAL);
    const r = await runWithClosedStdout(['exec', '--session', 'j', '--json', '--', 'echo hi'], t);
    expect(r.stderr).toBe('');
    expect(r).toMatchObject({ code: 141, signal: null });
  });
});
