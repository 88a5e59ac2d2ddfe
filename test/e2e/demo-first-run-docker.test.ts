import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { expect, it } from 'vitest';
import { REPO, runBerth, type CliRun } from '../helpers/cli.js';
import { TEST_IMAGE } from '../helpers/docker.js';
import { describeDocker, docker, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';

/*
 * First run, as the README's quick start has it: `npm run demo`, then a real `berth exec` from the
 * same directory. The demo must leave behind exactly the image that exec uses (here one the user's
 * config names, so the test builds a fresh one and never touches the shared default image) and
 * must not reach for apt when Docker already runs. The image is the test image under the name the
 * config gives, so the demo finds it built and the test takes seconds.
 */

const reg = installs('berth-first-run-');

/** Runs scripts/demo.sh as `npm run demo` does, from `cwd`, with `env`. */
function runDemo(cwd: string, env: NodeJS.ProcessEnv): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [join(REPO, 'scripts/demo.sh')], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 100_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stdout, stderr });
    });
  });
}

describeDocker('first run: the demo, then the next berth exec', () => {
  dockerSuiteHooks(reg);

  it('the demo builds the image the next `berth exec` uses, which then runs; no apt while Docker runs', async () => {
    const t = reg.track();
    const image = `berth-first-run-${randomBytes(4).toString('hex')}:latest`;
    t.writeConfig(`docker:\n  image: ${image}\n`);
    // An apt-get that records being called: the demo must not need it here.
    const fakeBin = t.mkdir('fake-bin');
    const aptCalls = join(t.root, 'apt-calls');
    writeFileSync(join(fakeBin, 'apt-get'), `#!/bin/sh\necho "$@" >> ${aptCalls}\nexit 1\n`);
    chmodSync(join(fakeBin, 'apt-get'), 0o755);
    mkdirSync(join(t.root, 'logs'));
    // The image the user's config names, made here from the test image: a debian build takes minutes.
    const [repo, tag] = image.split(':') as [string, string];
    await docker.getImage(TEST_IMAGE).tag({ repo, tag });
    const env = { ...t.env, PATH: `${fakeBin}:${process.env['PATH']}`, BERTH_DEMO_BACKEND: 'docker', BERTH_APT_LOG: join(t.root, 'logs', 'apt.log') };
    try {
      const demo = await runDemo(t.dir, env);
      expect(demo.code, `demo failed:\n${demo.stdout}\n${demo.stderr}`).toBe(0);
      expect(demo.stdout).toContain('$ berth exec --session alice');
      expect(demo.stdout).toContain(`${image} already exists`);
      expect(demo.stderr).toContain(`demo: backend docker, image ${image}`);
      expect(() => readFileSync(aptCalls, 'utf8')).toThrow();

      const exec = await runBerth(['exec', '--session', 'first', '--', 'echo hello from $(hostname)'], { cwd: t.dir, env: t.env });
      expect(exec.stderr).toBe('');
      expect(exec.code).toBe(0);
      expect(exec.stdout).toMatch(/^hello from \S+\n$/);
      await runBerth(['close', '--session', 'first'], { cwd: t.dir, env: t.env });
    } finally {
      await docker.getImage(image).remove({ noprune: true }).catch(() => undefined);
    }
  }, 120_000);
});
