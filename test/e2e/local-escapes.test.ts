import { describe, onTestFinished } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { escapeSuite } from '../helpers/escapes.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * docs/design.md §5 on the host itself (`backend: local`), when berth runs as root and so may make
 * cgroups: each command runs in a cgroup of its own below its sandbox's, so what it starts ends at
 * its timeout, a disconnect or its job's kill whatever it does to its environment, session,
 * parentage or name. (A command that writes its pid elsewhere in the hierarchy leaves: on the host
 * it runs as berth's own user, and nothing is isolated; that is not tried here.)
 */

const IS_ROOT = process.getuid?.() === 0;

async function open(): Promise<Broker> {
  const broker = await Broker.open({
    config: parseConfig({ backend: 'local', persistent: false }), berthHome: tempDir('berth-lesc-'), env: { PATH: process.env['PATH'] },
  });
  onTestFinished(() => broker.close());
  return broker;
}

if (IS_ROOT) {
  describe('escaped processes on the host (local backend, berth as root)', () => {
    escapeSuite({ open, cgroupfsClosed: false, bounded: false });
  });
} else {
  console.warn('skipping local escapes: berth makes cgroups on the host only as root');
  describe.skip('escaped processes on the host (skipped: berth makes cgroups on the host only as root)', () => {
    escapeSuite({ open, cgroupfsClosed: false, bounded: false });
  });
}
