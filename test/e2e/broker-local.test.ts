import { readdirSync } from 'node:fs';

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { runWithScope } from '../../src/scope/async-context.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { tempDir } from '../helpers/temp-dir.js';

function home(): string {
  return tempDir('berth-broker-');
}

async function open(berthHome: string, config: Record<string, unknown>, env: NodeJS.ProcessEnv = {}, holdSessions = true): Promise<Broker> {
  return Broker.open({ config: parseConfig({ backend: 'local', ...config }), berthHome, env: { PATH: process.env['PATH'], ...env }, holdSessions });
}

describe('Broker on the local backend', () => {
  it('concurrent first calls for one identity create one sandbox', async () => {
    const h = home();
    await using broker = await open(h, { persistent: false });
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => broker.exec({ session: 'same' }, `echo ${i} >> log; pwd`)));
    expect(new Set(results.map((r) => r.stdout)).size).toBe(1);
    expect(readdirSync(join(h, 'sandboxes', 'local'))).toHaveLength(1);
    expect(broker.list('local')).toHaveLength(1);
    const log = await broker.exec({ session: 'same' }, 'sort -n log | tr "\\n" " "');
    expect(log.stdout).toBe('0 1 2 3 4 5 6 7 8 9 ');
  });

  it('the async context beats BERTH_SESSION in the env, and an explicit scope beats the context', async () => {
    await using broker = await open(home(), { persistent: false }, { BERTH_SESSION: 'from-env' });
    expect(broker.explain({}).sandboxKey).toBe('session:from-env');
    const inCtx = await runWithScope({ session: 'from-context' }, () => broker.exec({}, 'true'));
    expect(inCtx.sandboxKey).toBe('session:from-context');
    const explicit = runWithScope({ session: 'from-context' }, () => broker.explain({ session: 'explicit' }));
    expect(explicit.sandboxKey).toBe('session:explicit');
  });

  it('after a timeout, the notice, explain, the next call and a later process all name the cwd the new shell took over in', async () => {
    const h = home();
    const first = await open(h, { persistent: false }, {}, false);
    expect((await first.exec({ session: 't' }, 'mkdir -p a b && cd a')).exitCode).toBe(0);
    const r = await first.exec({ session: 't' }, 'cd ../b && export MOVED=yes && sleep 30', { timeoutSeconds: 1 });
    expect(r).toMatchObject({ exitCode: 124, timedOut: true });
    expect(r.cwd).toMatch(/\/b$/);
    expect(r.stderr).toContain(`a new shell took over in ${r.cwd} with the exported variables`);
    expect(first.explain({ session: 't' }).cwd).toBe(r.cwd);
    const same = await first.exec({ session: 't' }, 'pwd; echo "[$MOVED]"');
    expect(same.stdout).toBe(`${r.cwd}\n[yes]\n`);
    await first.close();
    await using later = await open(h, { persistent: false }, {}, false);
    expect(later.explain({ session: 't' }).cwd).toBe(r.cwd);
    expect((await later.exec({ session: 't' }, 'pwd; echo "[$MOVED]"')).stdout).toBe(`${r.cwd}\n[yes]\n`);
  });

  it('records cwd only from what the shell reports, never from workdir, and keeps it across a restart', async () => {
    const h = home();
    {
      // Detached sessions (as the CLI opens them) stay open when the process ends.
      await using broker = await open(h, { persistent: false }, {}, false);
      await broker.exec({ session: 's' }, 'mkdir -p a b');
      const w = await broker.exec({ session: 's' }, 'pwd', { workdir: '/nonexistent-berth-workdir' });
      expect(w.exitCode).toBe(125); // a missing workdir is an error result (berth did not run it), the shell unaffected
      const cd = await broker.exec({ session: 's' }, 'cd a');
      expect(cd.cwd).toMatch(/\/a$/);
      const wd = await broker.exec({ session: 's' }, 'pwd', { workdir: cd.cwd.replace(/\/a$/, '/b') });
      expect(wd.stdout.trim()).toMatch(/\/b$/);
      expect(wd.cwd).toMatch(/\/a$/);
      expect(broker.explain({ session: 's' }).cwd).toMatch(/\/a$/);
    }
    await using again = await open(h, { persistent: false }, {}, false);
    expect(again.explain({ session: 's' }).cwd).toMatch(/\/a$/);
    const r = await again.exec({ session: 's' }, 'pwd');
    expect(r.stdout.trim()).toMatch(/\/a$/);
  });

  it('a subagent shares its parent\'s sandbox, has its own shell and starts in the parent\'s cwd', async () => {
    await using broker = await open(home(), { scope: 'task' });
    await broker.exec({ session: 's', task: 'parent' }, 'mkdir -p work && cd work && export ONLY_PARENT=1');
    const child = await broker.exec({ session: 's', task: 'child', parentTask: 'parent' }, 'pwd; echo "${ONLY_PARENT:-unset}"');
    expect(child.sandboxKey).toBe('parent');
    expect(child.stdout).toMatch(/\/work\nunset\n$/);
    await broker.exec({ session: 's', task: 'child' }, 'cd ..');
    const parent = await broker.exec({ session: 's', task: 'parent' }, 'pwd');
    expect(parent.stdout.trim()).toMatch(/\/work$/);
  });

  it('an alias that would close a cycle is refused', async () => {
    await using broker = await open(home(), { scope: 'task' });
    broker.explain({ task: 'b', parentTask: 'a' });
    expect(() => broker.explain({ task: 'a', parentTask: 'b' })).toThrow(/cycle/);
  });

  it('multiProfile: one raw session id under two profiles gives two keys and two cwd records; closing one leaves the other', async () => {
    await using broker = await open(home(), { multiProfile: true, persistent: false });
    const a = await broker.exec({ profile: 'alpha', session: 'chat' }, 'mkdir -p x && cd x');
    const b = await broker.exec({ profile: 'beta', session: 'chat' }, 'mkdir -p y && cd y');
    expect(a.sandboxKey).toBe('profile:alpha:session:chat');
    expect(b.sandboxKey).toBe('profile:beta:session:chat');
    await broker.closeSession({ profile: 'alpha', session: 'chat' });
    expect(broker.explain({ profile: 'alpha', session: 'chat' }).cwd).not.toMatch(/\/x$/);
    expect(broker.explain({ profile: 'beta', session: 'chat' }).cwd).toMatch(/\/y$/);
  });

  it('closing a session removes its ephemeral sandbox, its aliases and cwd records, and keeps persistent ones', async () => {
    const h = home();
    await using broker = await open(h, { persistent: false });
    await broker.exec({ session: 'eph' }, 'cd /tmp');
    await broker.exec({}, 'echo kept > f');
    broker.explain({ session: 'eph', task: 'kid', parentTask: 'boss' });
    const r = await broker.closeSession({ session: 'eph' });
    expect(r.removed).toEqual(['session:eph']);
    expect(broker.list('local').map((s) => s.sandboxKey)).toEqual(['default']);
    const store = StateStore.open(h);
    try {
      expect(store.scopes.aliasParent('local', 'default', 'kid')).toBeUndefined();
    } finally {
      store.close();
    }
    expect(broker.explain({ session: 'eph' }).cwd).not.toBe('/tmp');
    expect((await broker.exec({}, 'cat f')).stdout).toBe('kept\n');
  });

  it('tenants are hard namespaces: same keys, different sandboxes, and list is per tenant', async () => {
    await using broker = await open(home(), { persistent: false });
    await broker.exec({ tenant: 'a', session: 's' }, 'echo A > mine');
    const b = await broker.exec({ tenant: 'b', session: 's' }, 'cat mine');
    expect(b.exitCode).toBe(1);
    expect(broker.list('a').map((s) => s.tenant)).toEqual(['a']);
    expect(broker.list('b').map((s) => s.tenant)).toEqual(['b']);
  });

  it('a library broker holds its sessions: shutting it down removes their ephemeral sandboxes', async () => {
    const h = home();
    const broker = await open(h, { persistent: false });
    await broker.exec({ session: 'held' }, 'true');
    await broker.exec({}, 'true');
    await broker.close();
    expect(readdirSync(join(h, 'sandboxes', 'local'))).toEqual(['default']);
  });

  it('task overrides: an image/backend override isolates the task, a cwd-only override does not', async () => {
    await using broker = await open(home(), { persistent: false });
    broker.setTaskOverride({ session: 's', task: 'iso' }, { backend: 'local' });
    expect(broker.explain({ session: 's', task: 'iso' })).toMatchObject({ sandboxKey: 'iso', rule: 'auto:1' });
    broker.setTaskOverride({ session: 's', task: 'plain' }, { cwd: home() });
    expect(broker.explain({ session: 's', task: 'plain' }).sandboxKey).toBe('session:s');
    expect(() => broker.setTaskOverride({ session: 's', task: 'x' }, { backend: 'docker' })).toThrow(/does not allow/);
  });

  it('a user\'s own values reach only that user\'s own sandbox, never one other users share', async () => {
    const env = { BERTH_USER_TELEGRAM_1_GH_TOKEN: 'alice-token-value-1' };
    await using broker = await open(home(), { scope: 'auto' }, env);
    const own = await broker.exec({ session: 'dm', user: 'telegram:1' }, 'echo "${GH_TOKEN:-none}" | rev');
    expect(own.sandboxKey).toBe('user:telegram:1');
    expect(own.stdout).toBe('1-eulav-nekot-ecila\n');
    await using shared = await open(home(), { scope: 'task' }, env);
    const b = shared.explain({ session: 'grp', task: 'build', user: 'telegram:1' });
    expect(b.sandboxKey).toBe('build');
    expect(b.envNames).not.toContain('GH_TOKEN');
    expect(b.envMissing).toContain('GH_TOKEN');
    const inTask = await shared.exec({ session: 'grp', task: 'build', user: 'telegram:1' }, 'echo "${GH_TOKEN:-none}"');
    expect(inTask.stdout).toBe('none\n');
  });

  it('the idle reaper removes only the idle sandbox, never a busy one of the same session, and close() during a sweep is safe', async () => {
    const broker = await open(home(), { persistent: false, lifecycle: { idleSeconds: 10 } });
    try {
      await broker.exec({ session: 's1', user: 'telegram:1' }, 'true');
      // The user's sandbox goes idle while the session's own sandbox runs a long command.
      const busy = await broker.exec({ session: 's1' }, 'sleep 14; echo survived', { timeoutSeconds: 30 });
      expect(busy).toMatchObject({ exitCode: 0, stdout: 'survived\n', sandboxKey: 'session:s1' });
      const keys = broker.list('local').map((x) => x.sandboxKey);
      expect(keys).toContain('session:s1');
      expect(keys).not.toContain('user:telegram:1');
    } finally {
      await broker.close();
    }
  }, 40_000);

  it('readFile returns file content with granted secret values redacted, like command output', async () => {
    await using broker = await open(home(), { persistent: false, env: { forward: ['MY_SECRET'] } }, { MY_SECRET: 'supersecretvalue42' });
    await broker.exec({ session: 'r' }, 'echo "token=$MY_SECRET" > f.txt');
    const r = await broker.files.readFile({ session: 'r' }, { path: 'f.txt' });
    expect(r.data.toString()).toBe('token=[REDACTED]\n');
  });
});
