import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { basename, join } from 'node:path';
import { expect, it } from 'vitest';
import { parseCgroupMounts } from '../../src/backends/cgroups/proc-files.js';
import { bwrapInstall, describeBwrap, testRange } from '../helpers/bwrap.js';
import { escapeSuite } from '../helpers/escapes.js';

/*
 * docs/design.md §5 on bubblewrap: each sandbox's processes are in a cgroup of the sandbox's (its
 * init loop moved there before anything runs) and each command in one of its own below it, so what
 * a command starts ends at its timeout, a disconnect or its job's kill whatever it does to its
 * environment, session, parentage or name; the sandbox's unprivileged uid cannot write the hierarchy.
 */

const range = testRange();

describeBwrap('escaped processes in a bwrap sandbox', () => {
  escapeSuite({ open: () => bwrapInstall('berth-besc-', range).open({ bwrap: { maxProcesses: 256 } }), cgroupfsClosed: true, bounded: true });

  it("the sandbox's cgroup is named after its bwrap, which is moved in as it starts (outside the sandbox's namespaces), with the sandbox's pid 1; it goes with the sandbox", async () => {
    const b = await bwrapInstall('berth-besc-', range).open();
    const S = { session: 'group' };
    const mount = parseCgroupMounts(readFileSync('/proc/self/mountinfo', 'utf8')).unified;
    if (mount === undefined) throw new Error('no cgroup2 hierarchy is mounted');
    const group = join(mount, (await b.exec(S, 'sed -n "s/^0:://p" /proc/1/cgroup')).stdout.trim());
    const name = /^sb-(\d+)$/.exec(basename(group));
    expect(name, `${group} is not a sandbox's group`).not.toBeNull();
    const monitor = Number(name![1]);
    const members = readFileSync(join(group, 'cgroup.procs'), 'utf8').trim().split('\n').map(Number);
    expect(members).toContain(monitor);
    expect(readFileSync(`/proc/${monitor}/comm`, 'utf8').trim()).toBe('bwrap');
    expect(readlinkSync(`/proc/${monitor}/ns/pid`), "bwrap itself runs in the host's pid namespace").toBe(readlinkSync('/proc/self/ns/pid'));
    const inside = members.filter((pid) => pid !== monitor);
    expect(inside.length).toBeGreaterThan(0);
    for (const pid of inside) expect(readlinkSync(`/proc/${pid}/ns/pid`)).not.toBe(readlinkSync('/proc/self/ns/pid'));
    await b.removeSandboxOf(S);
    for (const deadline = Date.now() + 10_000; existsSync(group) && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(group), `${group} is still there after its sandbox went`).toBe(false);
  });
});
