import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { runBerth, tempInstall } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * One logger, injected from the composition root: every part logs under its namespace, lines
 * about a sandbox carry its key and a short ref, and no line holds a secret value.
 */

const SECRET = 'sk-logging-test-0123456789abcdef';

describe('one logger through every part (local backend)', () => {
  it('the shell and its warden log under berth:shell with the sandbox key and ref; no line carries a secret or a doubled prefix', async () => {
    const lines: { ns: string; msg: string }[] = [];
    const home = tempDir('berth-log-');
    const config = parseConfig({ backend: 'local', persistent: false, env: { forward: ['API_SECRET'] } });
    await using broker = await Broker.open({
      config, berthHome: home, env: { PATH: process.env['PATH'], API_SECRET: SECRET }, log: (ns, msg) => lines.push({ ns, msg }),
    });
    const s = { session: 's1' };
    const r = await broker.exec(s, 'echo "$API_SECRET" | wc -c; sleep 5', { timeoutSeconds: 1 });
    expect(r.exitCode).toBe(124);
    await broker.closeSession(s);

    const key = broker.explain(s).sandboxKey;
    const shell = lines.filter((l) => l.ns === 'berth:shell').map((l) => l.msg);
    // The shell's own lines, once only reachable through NODE_DEBUG, now reach the broker's sink.
    expect(shell.some((m) => m.startsWith(`${key} session_s1-`) && /\[[^\]]+\] shell started \(pid \d+, cwd /.test(m)), shell.join('\n')).toBe(true);
    expect(shell.some((m) => /: \[[^\]]+\] timeout: killed \d+ process\(es\)/.test(m)), shell.join('\n')).toBe(true);
    expect(shell.some((m) => /: warden: running \(pid \d+\)$/.test(m)), shell.join('\n')).toBe(true);
    expect(lines.filter((l) => l.msg.includes(SECRET))).toEqual([]);
    expect(lines.filter((l) => l.msg.startsWith('berth:'))).toEqual([]);
  });

  it('BERTH_DEBUG reaches the shell\'s lines through the CLI', async () => {
    using t = tempInstall('backend: local\npersistent: false\n');
    const r = await runBerth(['exec', '--session', 'dbg', '--', 'true'], { env: { ...t.env, BERTH_DEBUG: 'berth:shell' }, cwd: t.dir });
    expect(r.code, r.stderr).toBe(0);
    // Off a terminal each line is one JSON record with its level, component and sandbox.
    const records = r.stderr.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as { level: string; component: string; msg: string; sandbox?: string; ref?: string });
    expect(records.some((x) => x.level === 'debug' && x.sandbox === 'session:dbg' && /^session_dbg-[0-9a-f]{12}$/.test(x.ref ?? '')
      && /^\[[^\]]+\] shell started \(pid \d+, cwd /.test(x.msg)), r.stderr).toBe(true);
    // Only what was asked for.
    expect(records.filter((x) => x.component !== 'berth:shell')).toEqual([]);
  });
});
