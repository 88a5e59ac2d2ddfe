import { expect, it } from 'vitest';
import { runBerth } from '../helpers/cli.js';
import { TEST_IMAGE } from '../helpers/docker.js';
import { describeDocker, dockerSuiteHooks, ensureImage, installs } from '../helpers/docker-e2e.js';

/*
 * `berth image build` without a terminal (stderr a pipe, as in CI or a log): no progress lines at
 * all, only the result on stdout. (On a terminal the steps are drawn by the progress renderer:
 * test/unit/cli-progress-renderer.test.ts.) The reuse path keeps this test off the network.
 */

const reg = installs('berth-image-progress-');

describeDocker('berth image build progress (docker)', () => {
  dockerSuiteHooks(reg, async () => undefined);

  it('not a terminal: nothing on stderr, the one result line on stdout', async () => {
    await ensureImage();
    const t = reg.track();
    const r = await runBerth(['image', 'build', '--variant', 'minimal', '--image', TEST_IMAGE], { env: t.env, cwd: t.dir });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`${TEST_IMAGE} already exists (use --force to rebuild)\n`);
  });
});
