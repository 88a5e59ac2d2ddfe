import { describe, expect, it } from 'vitest';
import type { SandboxIdentity } from '../../src/scope/naming.js';
import type { CallScope } from '../../src/scope/call-scope.js';
import {
  containerName,
  identityDigest,
  sandboxDirName,
  sandboxIdentity,
  shellIdentity,
} from '../../src/scope/naming.js';

const id = (key: string, tenant = 'local', profile = 'default', installation = 'inst-1'): SandboxIdentity =>
  sandboxIdentity(installation, tenant, profile, key);

/** Deterministic PRNG so a failing property run can be replayed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ALPHABET = [...'abcAB01._-:/\\ é✓', 'session:', 'user:', '-0123456789ab', '..'];

function randomKey(rand: () => number): string {
  const n = 1 + Math.floor(rand() * 8);
  let s = '';
  for (let i = 0; i < n; i++) s += ALPHABET[Math.floor(rand() * ALPHABET.length)];
  return s;
}

function assertSafeDirName(name: string): void {
  expect(name).not.toMatch(/[:/\\]/);
  expect(['', '.', '..']).not.toContain(name);
  expect(name.length).toBeLessThanOrEqual(128);
}

describe('sandboxIdentity and identityDigest', () => {
  it('drops the profile for shared:* keys only', () => {
    expect(id('shared:k', 'local', 'p').profile).toBeUndefined();
    expect(id('session:s', 'local', 'p').profile).toBe('p');
  });

  it('is a hex sha256 that changes with every field', () => {
    const base = identityDigest(id('k'));
    expect(base).toMatch(/^[0-9a-f]{64}$/);
    expect(identityDigest(id('k'))).toBe(base);
    for (const other of [id('k2'), id('k', 't2'), id('k', 'local', 'p2'), id('k', 'local', 'default', 'inst-2')]) {
      expect(identityDigest(other)).not.toBe(base);
    }
  });

  it('cannot be confused by separators inside fields', () => {
    expect(identityDigest(sandboxIdentity('a', 'b:c', 'd', 'e'))).not.toBe(
      identityDigest(sandboxIdentity('a:b', 'c', 'd', 'e')),
    );
  });
});

describe('sandboxDirName', () => {
  it('keeps a safe key verbatim under the default tenant and profile', () => {
    for (const key of ['default', 'build', 'task-1', 'a.b_c-d', 'x'.repeat(100)]) {
      expect(sandboxDirName(id(key))).toBe(key);
    }
  });

  it('hashes keys with unsafe characters: session:a and session_a get different dirs', () => {
    const colon = sandboxDirName(id('session:a'));
    expect(colon).toMatch(/^session_a-[0-9a-f]{12}$/);
    expect(sandboxDirName(id('session_a'))).toBe('session_a');
    expect(colon).not.toBe(sandboxDirName(id('session_a')));
  });

  it.each([
    ['.', '.'],
    ['..', '..'],
    ['a key of the hashed form', 'build-0123456789ab'],
    ['a key over 100 chars', 'x'.repeat(101)],
    ['uppercase (case-folding file systems)', 'Build'],
    ['a leading dash', '-rf'],
    ['a leading dot', '.hidden'],
    ['a slash', 'a/b'],
    ['a backslash', 'a\\b'],
    ['unicode', 'é'],
  ])('does not keep %s verbatim', (_what, key) => {
    const name = sandboxDirName(id(key));
    expect(name).not.toBe(key);
    expect(name).toMatch(/-[0-9a-f]{12}$/);
    assertSafeDirName(name);
  });

  it('a tenant or profile other than the defaults changes the dir name', () => {
    const plain = sandboxDirName(id('build'));
    const tenant = sandboxDirName(id('build', 'acme'));
    const profile = sandboxDirName(id('build', 'local', 'coder'));
    expect(new Set([plain, tenant, profile]).size).toBe(3);
    expect(tenant).toMatch(/^build-[0-9a-f]{12}$/);
  });

  it('is stable across calls', () => {
    const key = 'session:😀/..\\x';
    expect(sandboxDirName(id(key, 't', 'p'))).toBe(sandboxDirName(id(key, 't', 'p')));
  });

  it('stays within 128 characters for long keys', () => {
    const name = sandboxDirName(id('session:' + 'y'.repeat(250)));
    assertSafeDirName(name);
    expect(name.length).toBeLessThanOrEqual(113);
  });

  it('two identities never share a directory, even on a case-folding file system (property)', () => {
    const rand = prng(0xbe27);
    const byDir = new Map<string, string>();
    const tenants = ['local', 'acme', 'Local'];
    const profiles = ['default', 'p', 'P'];
    for (let i = 0; i < 20_000; i++) {
      const identity = id(randomKey(rand), tenants[i % 3], profiles[Math.floor(i / 3) % 3]);
      const name = sandboxDirName(identity);
      assertSafeDirName(name);
      const fingerprint = JSON.stringify(identity);
      const folded = name.toLowerCase();
      const previous = byDir.get(folded);
      if (previous !== undefined) expect(previous).toBe(fingerprint);
      byDir.set(folded, fingerprint);
    }
    expect(byDir.size).toBeGreaterThan(1000);
  });
});

describe('containerName', () => {
  const docker = /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/;

  it('is deterministic for persistent sandboxes and changes with the installation', () => {
    const a = containerName(id('default'), false);
    expect(a).toMatch(/^berth-[0-9a-f]{24}$/);
    expect(containerName(id('default'), false)).toBe(a);
    expect(containerName(id('default', 'local', 'default', 'inst-2'), false)).not.toBe(a);
    expect(a.startsWith('berth-' + identityDigest(id('default')).slice(0, 24))).toBe(true);
  });

  it('is unique per creation for ephemeral sandboxes and never equals a persistent name', () => {
    const identity = id('session:s1');
    const one = containerName(identity, true);
    const two = containerName(identity, true);
    expect(one).not.toBe(two);
    expect(one).toMatch(docker);
    expect(one).not.toBe(containerName(identity, false));
    expect(containerName(identity, true, 'abc')).toBe(`berth-${identityDigest(identity).slice(0, 12)}-abc`);
  });

  it('cleans a unique suffix into a valid docker name of at most 63 chars', () => {
    const name = containerName(id('k'), true, 'a b/c:d' + 'x'.repeat(100));
    expect(name).toMatch(docker);
    expect(name.length).toBeLessThanOrEqual(63);
    expect(containerName(id('k'), true, '///')).toMatch(/^berth-[0-9a-f]{12}-[0-9a-f]{16}$/);
  });
});

describe('shellIdentity', () => {
  const scope = (s: Partial<CallScope>): CallScope => ({ tenant: 'local', profile: 'default', ...s });

  it('is the task when it is a registered subagent, else the session, else the task, else default', () => {
    expect(shellIdentity(scope({ session: 's', task: 't' }), true).id).toBe('task:t');
    expect(shellIdentity(scope({ session: 's', task: 't' }), false).id).toBe('session:s');
    expect(shellIdentity(scope({ task: 't' }), false).id).toBe('task:t');
    expect(shellIdentity(scope({}), false).id).toBe('default');
    expect(shellIdentity(scope({ session: 's' }), true).id).toBe('session:s');
  });

  it('lives within tenant, profile and user', () => {
    const digests = [
      scope({ session: 's1' }),
      scope({ session: 's1', profile: 'p' }),
      scope({ session: 's1', tenant: 'acme' }),
      scope({ session: 's1', user: 'telegram:1' }),
      scope({ session: 's1', user: 'telegram:2' }),
    ].map((s) => shellIdentity(s, false).digest);
    expect(new Set(digests).size).toBe(digests.length);
    expect(shellIdentity(scope({ session: 's1' }), false).digest).toBe(digests[0]);
  });

  it('has a file stem safe for a file name, unique per identity', () => {
    const a = shellIdentity(scope({ session: '../../etc/passwd:x' }), false);
    expect(a.fileStem).toMatch(/^[a-z0-9][a-z0-9._-]*-[0-9a-f]{16}$/);
    const b = shellIdentity(scope({ session: '../../etc/passwd:y' }), false);
    expect(a.fileStem).not.toBe(b.fileStem);
  });
});
