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
});
