import { describe, expect, it } from 'vitest';
import { PolicyRefusedError } from '../../src/errors.js';
import { assertSandboxPath, cleanEntryName, normalizeSandboxPath, sandboxPathRefusal, type SandboxPathPolicy } from '../../src/files/sandbox-path.js';
import { stagingDirFor, sessionStagingDir, tenantDirName } from '../../src/files/staging.js';

const docker: SandboxPathPolicy = { roots: ['/workspace', '/root', '/tmp'], home: '/root', berthDirs: ['/root/.berth'] };
const local: SandboxPathPolicy = { roots: ['/h/.berth/sandboxes/local/s1'], home: '/h/.berth/sandboxes/local/s1', berthDirs: ['/h/.berth/sandboxes/local/s1/.berth'] };

describe('normalizeSandboxPath', () => {
  it('takes relative paths from the cwd and cleans the result', () => {
    expect(normalizeSandboxPath('out/chart.png', '/workspace/app')).toBe('/workspace/app/out/chart.png');
    expect(normalizeSandboxPath('/workspace//a/./b/', '/x')).toBe('/workspace/a/b');
    expect(normalizeSandboxPath('.', '/workspace')).toBe('/workspace');
  });

  it('refuses "..", even where it would stay inside, and empty or NUL paths', () => {
    for (const p of ['../etc/passwd', '/workspace/../etc/passwd', '/workspace/a/../b', '..', '']) {
      expect(() => normalizeSandboxPath(p, '/workspace'), p).toThrow(PolicyRefusedError);
    }
    expect(() => normalizeSandboxPath('a\0b', '/workspace')).toThrow(/NUL/);
    expect(() => normalizeSandboxPath('/workspace/../etc/passwd', '/')).toThrow(/"\.\." segments are not allowed/);
  });
});

describe('sandboxPathRefusal', () => {
  it('allows the workspace, the home and /tmp on docker', () => {
    for (const p of ['/workspace', '/workspace/a/b.png', '/root/notes.md', '/tmp/x', '/root']) {
      expect(sandboxPathRefusal(p, docker), p).toBeUndefined();
    }
  });

  it('names the rule: kernel interfaces, credential files, berth state, home credential dirs, outside the roots', () => {
    expect(sandboxPathRefusal('/proc/self/environ', docker)).toMatch(/under \/proc/);
    expect(sandboxPathRefusal('/proc/1/environ', docker)).toMatch(/under \/proc/);
    expect(sandboxPathRefusal('/sys/kernel', docker)).toMatch(/under \/sys/);
    expect(sandboxPathRefusal('/dev/sda', docker)).toMatch(/under \/dev/);
    expect(sandboxPathRefusal('/etc/shadow', docker)).toMatch(/credential location \(\/etc\/shadow\)/);
    expect(sandboxPathRefusal('/root/.berth', docker)).toMatch(/berth's own state/);
    expect(sandboxPathRefusal('/root/.berth/shells/x.sh', docker)).toMatch(/berth's own state/);
    expect(sandboxPathRefusal('/root/.berth/jobs/j1/out', docker)).toMatch(/berth's own state/);
    for (const c of ['.ssh/id_ed25519', '.aws/credentials', '.gnupg', '.docker/config.json', '.kube/config', '.config/gh/hosts.yml', '.netrc', '.git-credentials']) {
      expect(sandboxPathRefusal(`/root/${c}`, docker), c).toMatch(/credential location \(~\//);
    }
    expect(sandboxPathRefusal('/etc/passwd', docker)).toMatch(/outside the sandbox's file roots \(\/workspace, \/root, \/tmp\)/);
    expect(sandboxPathRefusal('/', docker)).toMatch(/outside/);
    expect(sandboxPathRefusal('/workspacex/a', docker)).toMatch(/outside/);
    expect(sandboxPathRefusal('relative', docker)).toMatch(/not an absolute/);
  });

  it('on local the sandbox dir is the only root; its .berth and credential dirs are refused; host /tmp is not a root', () => {
    expect(sandboxPathRefusal('/h/.berth/sandboxes/local/s1/out.txt', local)).toBeUndefined();
    expect(sandboxPathRefusal('/h/.berth/sandboxes/local/s1/.berth/shells/a.sh', local)).toMatch(/berth's own state/);
    expect(sandboxPathRefusal('/h/.berth/sandboxes/local/s1/.ssh/id_rsa', local)).toMatch(/credential/);
    expect(sandboxPathRefusal('/h/.berth/sandboxes/local/s2/secret', local)).toMatch(/outside/);
    expect(sandboxPathRefusal('/tmp/x', local)).toMatch(/outside/);
  });

  it('assertSandboxPath names the path as asked and as resolved', () => {
    expect(() => assertSandboxPath('/workspace/x', '/etc/passwd', docker))
      .toThrow('sandbox path "/workspace/x" (resolves to "/etc/passwd") is outside the sandbox\'s file roots (/workspace, /root, /tmp); transfer files under /workspace, /root, /tmp instead');
  });
});

describe('cleanEntryName', () => {
  it('drops ./ and trailing slashes; root entries are empty; absolute and .. are unsafe', () => {
    expect(cleanEntryName('./a/b/')).toBe('a/b');
    expect(cleanEntryName('./')).toBe('');
    expect(cleanEntryName('.')).toBe('');
    expect(cleanEntryName('/etc/passwd')).toBeUndefined();
    expect(cleanEntryName('a/../../x')).toBeUndefined();
  });
});

describe('staging dirs', () => {
  it('are per tenant, session and user; names never escape or fold together', () => {
    const a = stagingDirFor('/h', { tenant: 'acme', profile: 'default', user: 'telegram:1', sessionRef: 's1' });
    const b = stagingDirFor('/h', { tenant: 'acme', profile: 'default', user: 'telegram:2', sessionRef: 's1' });
    const c = stagingDirFor('/h', { tenant: 'acme', profile: 'other', user: 'telegram:1', sessionRef: 's1' });
    expect(new Set([a, b, c]).size).toBe(3);
    const session = sessionStagingDir('/h', { tenant: 'acme', profile: 'default', sessionRef: 's1' });
    expect(a.startsWith(`${session}/`) && b.startsWith(`${session}/`)).toBe(true);
    expect(session.startsWith('/h/staging/acme/')).toBe(true);
    expect(tenantDirName('..')).toMatch(/^_[0-9a-f]{16}$/);
    expect(tenantDirName('Acme')).not.toBe(tenantDirName('acme'));
  });
});
