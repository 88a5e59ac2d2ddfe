import { dockerConfig, describeDocker, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';
import { escapeSuite } from '../helpers/escapes.js';

/*
 * docs/design.md §5 on the real engine: berth runs each command in a cgroup of its own nested in
 * the container's, so what a command starts ends at its timeout, a disconnect or its job's kill
 * whatever it does to its environment, session, parentage or name (an escaped fork bomb too), and
 * a command that tries to write itself out of its group cannot (the hierarchy is read-only inside).
 */

const reg = installs('berth-desc-');

describeDocker('escaped processes on the real docker engine', () => {
  dockerSuiteHooks(reg);
  escapeSuite({ open: () => reg.track().open(dockerConfig({ persistent: false })), cgroupfsClosed: true, bounded: true });
});
