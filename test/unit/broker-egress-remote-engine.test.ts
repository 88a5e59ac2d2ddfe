import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { ConfigError } from '../../src/errors.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * berth's egress proxy listens inside each docker sandbox's network namespace on this host: a
 * DOCKER_HOST on another machine can never serve a place that uses it, and says so at start-up
 * (before any engine is contacted), not at the first call.
 */

const allowlist = { egress: { mode: 'allowlist', allow: ['api.github.com'] } };

async function openWith(dockerHost: string, config: Record<string, unknown>): Promise<unknown> {
  try {
    const b = await Broker.open({ config: parseConfig(config), berthHome: tempDir('berth-remote-engine-'), env: { PATH: process.env['PATH'], DOCKER_HOST: dockerHost, T: 'a-value' } });
    await b.close();
    return undefined;
  } catch (err) {
    return err;
  }
}

describe('egress on a docker engine of another machine', () => {
  it('is a start-up ConfigError naming the places, DOCKER_HOST and the fix', async () => {
    const err = await openWith('tcp://10.1.2.3:2375', { backend: 'docker', profiles: { bot: allowlist, ci: { credentials: { T: { hosts: ['api.github.com'] } } } } });
    expect(err).toBeInstanceOf(ConfigError);
    expect(String(err)).toMatch(/profile "bot", profile "ci" use berth's egress proxy .* on backend docker, but DOCKER_HOST=tcp:\/\/10\.1\.2\.3:2375 names an engine on another machine/);
    expect(String(err)).toMatch(/unset DOCKER_HOST there\), or use egress mode open without credentials/);
    expect(String(await openWith('ssh://me@build.example', { backend: 'docker', ...allowlist }))).toMatch(/^ConfigError: the top level uses berth's egress proxy/);
  });

  it('is not refused for that reason where the engine may be this host\'s, or no place uses the proxy there', async () => {
    const notOurs = (e: unknown): boolean => !String(e).includes('names an engine on another machine');
    // (These fail later, reaching no engine: what matters is that it is not this refusal.)
    expect(notOurs(await openWith('tcp://127.0.0.1:1', { backend: 'docker', ...allowlist }))).toBe(true);
    expect(notOurs(await openWith('tcp://[::1]:1', { backend: 'docker', ...allowlist }))).toBe(true);
    expect(notOurs(await openWith('tcp://LOCALHOST:1', { backend: 'docker', ...allowlist }))).toBe(true);
    expect(notOurs(await openWith('tcp://127.1:1', { backend: 'docker', ...allowlist }))).toBe(true);
    expect(notOurs(await openWith('tcp://10.1.2.3:2375', { backend: 'docker', egress: { mode: 'open' } }))).toBe(true);
    expect(notOurs(await openWith('tcp://10.1.2.3:2375', { backend: 'local', profiles: { box: { backend: 'bwrap', ...allowlist } } }))).toBe(true);
  });
});
