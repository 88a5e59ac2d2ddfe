import { expect, it } from 'vitest';
import { describeDocker, dockerConfig, dockerSuiteHooks, ensureImage, installs } from '../helpers/docker-e2e.js';

/*
 * The docker backend logs through the broker's one logger: namespace berth:docker (no doubled
 * "berth:backend berth:docker" prefix), the sandbox key and the short container id on each line
 * about a sandbox, and never a secret value.
 */

const reg = installs('berth-logging-');
const SECRET = 'sk-docker-logging-0123456789abcdef';

describeDocker('one logger on the docker backend', () => {
  dockerSuiteHooks(reg, ensureImage);

  it('lines about a sandbox carry its key and 12-hex container id; the shell\'s carry the same; no secret', async () => {
    const t = reg.track();
    const lines: { ns: string; msg: string }[] = [];
    const broker = await t.open(dockerConfig({ persistent: false, env: { forward: ['API_SECRET'] } }), {
      env: { PATH: process.env['PATH'], API_SECRET: SECRET }, log: (ns, msg) => lines.push({ ns, msg }),
    });
    const r = await broker.exec({ session: 'lg' }, 'echo "$API_SECRET" | wc -c');
    expect(r.exitCode, r.output).toBe(0);
    await broker.closeSession({ session: 'lg' });

    const docker = lines.filter((l) => l.ns === 'berth:docker').map((l) => l.msg);
    expect(docker.some((m) => /^session:lg [0-9a-f]{12}: created berth-[0-9a-f]{16}-[0-9a-f]{8}$/.test(m)), docker.join('\n')).toBe(true);
    expect(docker.some((m) => /^[0-9a-f]{12}: removed$/.test(m)), docker.join('\n')).toBe(true);
    const shell = lines.filter((l) => l.ns === 'berth:shell').map((l) => l.msg);
    expect(shell.some((m) => /^session:lg [0-9a-f]{12}: \[[^\]]+\] shell started/.test(m)), shell.join('\n')).toBe(true);
    expect(lines.filter((l) => l.ns === 'berth:backend' || l.msg.startsWith('berth:'))).toEqual([]);
    expect(lines.filter((l) => l.msg.includes(SECRET))).toEqual([]);
  });
});
