import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runBerth, tempInstall } from '../helpers/cli.js';

/*
 * The CLI on backend: bwrap where bubblewrap cannot run (a bwrap.path that does not exist): exit
 * 125 with what is missing and the fix, and the command never runs anywhere else. Needs no
 * bubblewrap on the host, so it runs everywhere.
 */

describe('berth on bwrap when bubblewrap cannot run', () => {
  it('exec exits 125 naming the missing bwrap and the fix; nothing runs on the host', async () => {
    using t = tempInstall('');
    // The sandbox root lives beside the install (removed with it), in a dir sandbox uids may traverse.
    chmodSync(dirname(t.dir), 0o711);
    writeFileSync(join(t.dir, 'berth.yaml'), `backend: bwrap\nbwrap:\n  path: /nonexistent/bwrap\n  root: ${join(dirname(t.dir), 'bwrap-root')}\n`);
    const marker = join(t.dir, 'ran-on-host');
    const r = await runBerth(['exec', '--session', 's', '--', `touch ${marker}`], { env: t.env, cwd: t.dir });
    expect(r.code, r.stderr).toBe(125);
    expect(r.stderr).toMatch(/bubblewrap \(\/nonexistent\/bwrap\) is not installed: install it .*or set bwrap\.path/);
    expect(existsSync(marker)).toBe(false);
  });
});
