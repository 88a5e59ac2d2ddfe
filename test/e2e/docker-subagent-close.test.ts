import { expect, it } from 'vitest';
import { runBerth, type CliRun } from '../helpers/cli.js';
import {
  containerFor, containerState, describeContainers, describeDocker, dockerConfigYaml, dockerSuiteHooks, installs, type TestInstall,
} from '../helpers/docker-e2e.js';

/*
 * Through the real `berth` binary: a subagent belongs to its parent's conversation
 * (docs/design.md §6), so closing the parent closes its subagents (and theirs), and the sandbox they share
 * goes. `persistent: false` with auto row 2: a task's sandbox is keyed by its root task.
 */

const reg = installs('berth-subclose-');

function berth(t: TestInstall, args: string[]): Promise<CliRun> {
  return runBerth(args, { env: t.env, cwd: t.dir, timeoutMs: 30_000 });
}

async function ok(t: TestInstall, args: string[]): Promise<CliRun> {
  const r = await berth(t, args);
  expect(r.code, `berth ${args.join(' ')}: ${r.stderr}`).toBe(0);
  return r;
}

describeDocker('berth close of a parent task closes its subagents (docker CLI)', () => {
  dockerSuiteHooks(reg);

  it('exec --task parent, exec --task kid --parent parent, close --task parent: the container goes', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    await ok(t, ['exec', '--task', 'parent', '--', 'true']);
    await ok(t, ['exec', '--task', 'kid', '--parent', 'parent', '--', 'true']);
    const c = await containerFor(t.installation, 'parent');
    const close = await ok(t, ['close', '--task', 'parent', '--json']);
    expect(JSON.parse(close.stdout)).toEqual({ removed: ['parent'], kept: [], wasOpen: true });
    expect(await containerState(c.id), `container ${c.id.slice(0, 12)}`).toBeUndefined();
    const left = await t.containers();
    expect(left, describeContainers(left)).toEqual([]);
  }, 120_000);

  it('a subagent of a subagent is closed too', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    await ok(t, ['exec', '--task', 'parent', '--', 'true']);
    await ok(t, ['exec', '--task', 'kid', '--parent', 'parent', '--', 'true']);
    await ok(t, ['exec', '--task', 'grandkid', '--parent', 'kid', '--', 'true']);
    const close = await ok(t, ['close', '--task', 'parent', '--json']);
    expect(JSON.parse(close.stdout)).toEqual({ removed: ['parent'], kept: [], wasOpen: true });
    const left = await t.containers();
    expect(left, describeContainers(left)).toEqual([]);
  }, 120_000);

  it('closing the subagent keeps its parent\'s sandbox; closing the parent then removes it', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    await ok(t, ['exec', '--task', 'parent', '--', 'true']);
    await ok(t, ['exec', '--task', 'kid', '--parent', 'parent', '--', 'true']);
    const c = await containerFor(t.installation, 'parent');
    expect(JSON.parse((await ok(t, ['close', '--task', 'kid', '--json'])).stdout)).toEqual({ removed: [], kept: ['parent'], wasOpen: true });
    expect((await containerState(c.id))?.running).toBe(true);
    expect(JSON.parse((await ok(t, ['close', '--task', 'parent', '--json'])).stdout)).toEqual({ removed: ['parent'], kept: [], wasOpen: true });
    expect(await containerState(c.id)).toBeUndefined();
  }, 120_000);

  it('another root task\'s sandbox and subagents are not touched by the close', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    await ok(t, ['exec', '--task', 'parent', '--', 'true']);
    await ok(t, ['exec', '--task', 'kid', '--parent', 'parent', '--', 'true']);
    await ok(t, ['exec', '--task', 'other', '--', 'true']);
    await ok(t, ['exec', '--task', 'otherkid', '--parent', 'other', '--', 'true']);
    const other = await containerFor(t.installation, 'other');
    await ok(t, ['close', '--task', 'parent']);
    expect((await containerState(other.id))?.running).toBe(true);
    const left = await t.containers();
    expect(left.map((c) => c.labels['berth.key']), describeContainers(left)).toEqual(['other']);
    // The other subagent still works in its parent's sandbox.
    const r = await ok(t, ['exec', '--json', '--task', 'otherkid', '--', 'true']);
    expect(JSON.parse(r.stdout).sandboxKey).toBe('other');
  }, 120_000);
});
