import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/config/schema.js';
import { filesConformance } from './files-conformance.js';

const roots: string[] = [];
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) await b.close();
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

async function open(extra: Record<string, unknown> = {}): Promise<{ broker: Broker; home: string }> {
  const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-files-')));
  roots.push(home);
  const broker = await Broker.open({ config: parseConfig({ backend: 'local', persistent: false, ...extra }), berthHome: home, env: { PATH: process.env['PATH'] } });
  brokers.push(broker);
  return { broker, home };
}

describe('file transfer on the local backend', () => {
  filesConformance('local', open, (line) => console.log(line));
});
