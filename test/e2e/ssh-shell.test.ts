import { afterEach, expect, it } from 'vitest';
import type { RemoteAccount } from '../../src/backends/ssh/accounts.js';
import { remoteRunner } from '../../src/backends/ssh/remote-exec.js';
import type { SpawnOptions } from '../../src/backends/backend.js';
import { execOnce } from '../../src/backends/plumbing/exec-once.js';
import { openShellVia } from '../../src/backends/plumbing/open-shell.js';
import { spawnIn } from '../../src/backends/ssh/sandbox-handle.js';
import { PersistentShell } from '../../src/shell/persistent-shell.js';
import { Warden } from '../../src/shell/warden.js';
import { waitFor } from '../helpers/docker-e2e.js';
import { describeSsh, SshFixture } from '../helpers/sshd.js';
import { tempDir } from '../helpers/temp-dir.js';

let fx: SshFixture | undefined;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
  await fx?.cleanup();
  fx = undefined;
}, 120_000);

/** berth's persistent shell (and its warden) over spawned processes of one sandbox account. */
async function shellFor(f: SshFixture, acct: RemoteAccount, env: Record<string, string> = {}, secretNames: string[] = []): Promise<PersistentShell> {
  const spawn = (argv: readonly string[], o: SpawnOptions) => spawnIn(f.spawnContext, acct, argv, { ...o, env: { ...env, ...o.env } });
  const warden = new Warden({ open: () => openShellVia(spawn, { env: {}, cwd: acct.workspace }), mayKillAll: false, label: acct.name });
  await warden.start();
  const shell = await PersistentShell.start({
    open: (shellEnv) => openShellVia(spawn, { env: shellEnv, cwd: acct.workspace }),
    execOnce: (argv, opts) => execOnce(spawn, argv, opts, acct.name),
    killer: warden,
    stateDir: acct.stateDir,
    shellId: 'default',
    defaultCwd: acct.workspace,
    secretNames,
    spillDir: tempDir('berth-ssh-spill-'),
    maxOutputChars: 100_000,
  });
  closers.push(async () => {
    await shell.close();
    await warden.close();
  });
  return shell;
}

/** Live processes of a uid whose command line contains `text`. */
async function matching(f: SshFixture, uid: number, text: string): Promise<number> {
  const r = await remoteRunner(f.pool, f.target)('ps -u "$1" -o stat=,args= | grep -v "^Z" | grep -cF -- "$2"; true', [String(uid), text]);
  return Number(r.stdout.trim());
}

const T = { timeoutMs: 20_000 };

describeSsh('berth\'s persistent shell over an SSH channel as a sandbox account (real sshd)', () => {
  it('keeps cwd, exported variables and functions between commands, and re-exports granted secrets for each', async () => {
    fx = new SshFixture();
    const acct = await fx.account();
    const sh = await shellFor(fx, acct, { API_TOKEN: 'tok-123456789' }, ['API_TOKEN']);
    expect((await sh.run('pwd', T)).stdout).toBe(`${acct.workspace}\n`);
    await sh.run('mkdir -p sub && cd sub && export KEEP=kept && greet() { echo "hi $1"; } && unset API_TOKEN', T);
    const r = await sh.run('pwd; echo "$KEEP"; greet you; echo "$API_TOKEN"; id -u', T);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe(`${acct.workspace}/sub\nkept\nhi you\ntok-123456789\n${acct.uid}\n`);
    expect(r.cwd).toBe(`${acct.workspace}/sub`);
  });

  it('on timeout ends the command\'s whole tree on the host (setsid escapee too) and a new shell takes over', async () => {
    fx = new SshFixture();
    const acct = await fx.account();
    const sh = await shellFor(fx, acct);
    await sh.run('cd /tmp && export KEEP=kept', T);
    const [grand, escaped, fg] = ['301.5', '302.5', '303.5'];
    const r = await sh.run(`echo partial; (sleep ${grand} &); setsid sleep ${escaped} & sleep ${fg}`, { timeoutMs: 1_500 });
    expect(r.exitCode).toBe(124);
    expect(r.stdout).toBe('partial\n');
    expect(r.shellReplaced).toBe(true);
    for (const arg of [grand, escaped, fg]) expect(await matching(fx, acct.uid, `sleep ${arg}`)).toBe(0);
    const after = await sh.run('echo "$KEEP"; pwd', T);
    expect(after.stdout).toBe('kept\n/tmp\n');
  });

  it('leaves no process of the account behind once the shell and its warden close', async () => {
    fx = new SshFixture();
    const acct = await fx.account();
    const sh = await shellFor(fx, acct);
    expect((await sh.run('echo up', T)).stdout).toBe('up\n');
    for (const c of closers.splice(0)) await c();
    expect(await waitFor(async () => (await matching(fx!, acct.uid, 'bash')) === 0, 15_000)).toBe(true);
  });
});
