import { describe, expect, it } from 'vitest';
import { connectConfig } from '../../src/backends/ssh/connection.js';
import { SshConnectionPool } from '../../src/backends/ssh/connections.js';
import { DEFAULT_POOL_SETTINGS, targetKey, type SshTarget } from '../../src/backends/ssh/target.js';
import { BerthError } from '../../src/errors.js';

const target: SshTarget = { host: 'build1', port: 22, user: 'root', identityFile: '/k', knownHostsFile: '/kh', trustOnFirstUse: false };

describe('the ssh2 settings berth connects with', () => {
  it('never forwards the agent, never falls back to keyboard-interactive, keeps keepalives on', () => {
    const c = connectConfig(target, DEFAULT_POOL_SETTINGS, { agent: '/run/agent.sock' }, []);
    expect(c.agentForward).toBe(false);
    expect(c.tryKeyboard).toBe(false);
    expect(c.agent).toBe('/run/agent.sock');
    expect(c.keepaliveInterval).toBe(DEFAULT_POOL_SETTINGS.keepaliveIntervalMs);
    expect(c.keepaliveInterval).toBeGreaterThan(0);
    expect(c.keepaliveCountMax).toBe(DEFAULT_POOL_SETTINGS.keepaliveCountMax);
    expect(c.readyTimeout).toBe(DEFAULT_POOL_SETTINGS.connectTimeoutMs);
    expect(c.algorithms).toBeUndefined();
  });

  it('offers only the host key algorithms known_hosts can check, when it knows any', () => {
    const c = connectConfig(target, DEFAULT_POOL_SETTINGS, { privateKey: Buffer.from('k') }, ['ssh-ed25519']);
    expect(c.algorithms?.serverHostKey).toEqual(['ssh-ed25519']);
  });

  it('keys pooled connections by host, port, user, credentials and trust settings', () => {
    const keys = new Set([
      targetKey(target),
      targetKey({ ...target, host: 'BUILD1' }),
      targetKey({ ...target, port: 2222 }),
      targetKey({ ...target, user: 'ana' }),
      targetKey({ ...target, identityFile: '/other' }),
      targetKey({ ...target, knownHostsFile: '/other' }),
      targetKey({ ...target, trustOnFirstUse: true }),
    ]);
    expect(keys.size).toBe(6);
  });

  it('refuses a maxSessions below 1', () => {
    expect(() => new SshConnectionPool({ maxSessions: 0 })).toThrow(BerthError);
    expect(() => new SshConnectionPool({ maxSessions: 2.5 })).toThrow(/whole number/);
  });
});
