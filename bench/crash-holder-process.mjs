import process from 'node:process';
import { setInterval } from 'node:timers';
import { Broker, parseConfig } from '../dist/index.js';

/*
 * A berth process for the crash-recovery bench (bench/hibernate.ts): the library from dist/, as an
 * application runs it. Opens a broker on argv[2] (its home) with the config in argv[3] (JSON),
 * brings up argv[4] sandboxes (session crash-0 ... crash-N, 8 at a time), prints `ready` with its
 * installation id and waits to be killed.
 */
const [home, configJson, count] = process.argv.slice(2);
const broker = await Broker.open({ config: parseConfig(JSON.parse(configJson)), berthHome: home, env: { PATH: process.env.PATH } });
const ids = Array.from({ length: Number(count) }, (_, i) => `crash-${i}`);
for (let i = 0; i < ids.length; i += 8) {
  await Promise.all(ids.slice(i, i + 8).map(async (session) => {
    const r = await broker.exec({ session }, 'true');
    if (r.exitCode !== 0) throw new Error(`session ${session}: exit ${r.exitCode}`);
  }));
}
process.stdout.write(`ready ${broker.installationId}\n`);
setInterval(() => undefined, 60_000);
