import { readFileSync } from 'node:fs';
import { Broker } from './src/broker/broker.js';
import { parseConfig } from './src/config/schema.js';
import { PersistentShell } from './src/shell/persistent-shell.js';
import { Warden } from './src/shell/warden.js';
const backend = process.argv[2] ?? 'docker';
const cfg = parseConfig(backend === 'docker' ? { backend: 'docker', docker: { image: process.argv[3] ?? 'berth-sandbox:minimal' }, persistent: false } : { backend: 'local' });
const broker = await Broker.open({ config: cfg, berthHome: '/tmp/e-scripts/home-measure-' + process.pid });
const scope = { session: 'm' };
try {
  await broker.exec(scope, 'true');
  const sandbox = await (broker as any).sandboxFor((broker as any).resolve(scope));
  const sb = sandbox.sandbox;
  const open = () => sb.openShell({ env: {}, cwd: sb.defaultCwd });
  const med = (a: number[]) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const ws: number[] = [], ss: number[] = [], both: number[] = [];
  const opts = (id: string) => ({ open: (e: any) => sb.openShell({ env: e, cwd: sb.defaultCwd }), execOnce: (a: any, o: any) => sb.execOnce(a, o), stateDir: sb.stateDir, shellId: id, defaultCwd: sb.defaultCwd, secretNames: [], spillDir: '/tmp/e-scripts/spill', maxOutputChars: 1000 });
  for (let i = 0; i < 10; i++) {
    let t = performance.now(); const w = new Warden({ open, mayKillAll: true }); await w.start(); ws.push(performance.now() - t);
    t = performance.now(); const s = await PersistentShell.start(opts('a' + i)); ss.push(performance.now() - t);
    t = performance.now(); const w2 = new Warden({ open, mayKillAll: true }); const [s2] = await Promise.all([PersistentShell.start(opts('b' + i)), w2.start()]); both.push(performance.now() - t);
    if (i === 9) {
      const pid = await w.pid();
      const r = await s.run(`for p in /proc/[0-9]*; do read -r l < $p/cmdline 2>/dev/null; done; grep -E '^(VmRSS|RssAnon|RssFile)' /proc/${pid}/status; cat /proc/${pid}/smaps_rollup 2>/dev/null | grep -E '^(Rss|Pss|Pss_Anon|Pss_File|Shared|Private)'`, { timeoutMs: 5000 });
      console.log('warden pid', pid, '\n' + r.stdout);
    }
    await s.close(); await s2.close(); await w.close(); await w2.close();
  }
  console.log(JSON.stringify({ backend, wardenOpenMs: med(ws), shellOpenMs: med(ss), shellWithWardenMs: med(both) }));
} finally {
  await broker.closeSession(scope); await broker.close();
}
