import { afterEach, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { BerthError } from '../../src/errors.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { sshConfigSection, SshInstalls } from '../helpers/ssh-e2e.js';
import { describeSsh } from '../helpers/sshd.js';

/*
 * Snapshots, restore and fork through the broker on ssh, against the real test sshd: files and
 * the shell's cwd and exported variable come back; a fork is another account, and every file
 * of its home is that account's (none keeps the source's uid), with no setuid or setgid bit; a
 * snapshot holding a granted secret's value is refused without naming the value.
 */

let installs: SshInstalls | undefined;
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) await b.close({ graceMs: 2_000 }).catch(() => undefined);
  await installs?.cleanup();
  installs = undefined;
}, 120_000);

const SECRET = 'tok-5c2e8f19a7d04b63';

async function open(extra: Record<string, unknown> = {}): Promise<Broker> {
  installs ??= new SshInstalls();
  const config = parseConfig({ backend: 'ssh', persistent: false, ssh: sshConfigSection(), exec: { timeoutSeconds: 30 }, ...extra });
  const broker = await Broker.open({ config, berthHome: installs.newHome(), env: { PATH: process.env['PATH'], API_TOKEN: SECRET } });
  brokers.push(broker);
  return broker;
}

const STATE = 'mkdir -p "$HOME/workspace/w/sub" && cd "$HOME/workspace/w/sub" && export STAGE=one && echo one > "$HOME/file" && ' +
  'echo x > "$HOME/suid" && chmod 6755 "$HOME/suid"';
const READ = 'printf "%s|%s|%s" "${PWD#"$HOME"}" "${STAGE-unset}" "$(cat "$HOME/file")"';

describeSsh('snapshots, restore and fork (ssh)', () => {
  it('restore and fork keep files, cwd and exported variables; a fork\'s files are all its own account\'s, without setuid or setgid bits', async () => {
    const b = await open();
    const s1 = b.session({ session: 's1' });
    expect((await s1.exec(STATE)).exitCode).toBe(0);
    // The source really had the bits, so their absence in the fork is the snapshot's doing.
    expect((await s1.exec('stat -c %a "$HOME/suid"')).stdout).toBe('6755\n');
    const srcUid = (await s1.exec('id -u')).stdout.trim();
    await s1.snapshots.create({ name: 'one' });
    await s1.exec('cd / && export STAGE=two && echo two > "$HOME/file"');
    await s1.snapshots.restore('one');
    expect((await s1.exec(READ)).stdout).toBe('/workspace/w/sub|one|one');

    await s1.fork({ toSession: 'f1', from: 'one' });
    const f1 = b.session({ session: 'f1' });
    expect((await f1.exec(READ)).stdout).toBe('/workspace/w/sub|one|one');
    const forkUid = (await f1.exec('id -u')).stdout.trim();
    expect(forkUid).not.toBe(srcUid);
    const owners = await f1.exec('find "$HOME" -printf "%U\\n" | sort -u');
    expect(owners.stdout).toBe(`${forkUid}\n`);
    expect((await f1.exec('find "$HOME" -perm /6000 | wc -l; stat -c %a "$HOME/suid"')).stdout).toBe('0\n755\n');
    // Independent: a change in the fork is not the source's.
    await f1.exec('echo f1 > "$HOME/file"');
    expect((await s1.exec('cat "$HOME/file"')).stdout).toBe('one\n');
    for (const s of ['s1', 'f1']) await b.closeSession({ session: s });
  }, 240_000);

  it('a snapshot of a sandbox with a granted secret\'s value in a file is refused, naming the variable, never the value', async () => {
    const b = await open({ env: { forward: ['API_TOKEN'] } });
    const s1 = b.session({ session: 's1' });
    expect((await s1.exec('echo "$API_TOKEN" > "$HOME/w-leak"')).exitCode).toBe(0);
    const err = await s1.snapshots.create({ name: 'leak' }).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('policy_refused');
    expect((err as Error).message).toMatch(/w-leak holds the value of granted variable API_TOKEN/);
    expect((err as Error).message).not.toContain(SECRET);
    expect(await s1.snapshots.list()).toEqual([]);
    // The file gone, the same sandbox snapshots.
    await s1.exec('rm "$HOME/w-leak"');
    await s1.snapshots.create({ name: 'clean' });
    expect((await s1.snapshots.list()).map((s) => s.name)).toEqual(['clean']);
    await b.closeSession({ session: 's1' });
  }, 240_000);
});
