import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { BackendUnavailableError } from '../../src/errors.js';
import type { HostFacts } from '../../src/backends/bwrap/host-facts.js';
import { probeBwrap } from '../../src/backends/bwrap/probe.js';
import { seccompProgram } from '../../src/backends/bwrap/seccomp.js';
import { describeBwrap, IS_ROOT, tempRoot, testRange } from '../helpers/bwrap.js';
import { exitCodeOf } from '../../src/cli/exit-codes.js';

/*
 * The start-up probe fails closed with what is missing and how to fix it. Hosts without user
 * namespaces are simulated by a bwrap stand-in that answers as bwrap does there; the filter that
 * does not take hold, by a stand-in that drops --seccomp before running the real bwrap.
 */

const range = testRange();
const user = IS_ROOT ? { uid: range.first, gid: range.first } : undefined;
const fine: HostFacts = { unprivilegedUsernsClone: undefined, maxUserNamespaces: '63000', apparmorRestrictUserns: undefined, berthSeccomp: '0', inContainer: false };

/** An executable script (readable by the sandbox uid) next to the root. */
function standIn(root: string, name: string, body: string): string {
  const path = join(root, '..', name);
  writeFileSync(path, `#!/bin/bash\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

describeBwrap('bwrap start-up probe', (host) => {
  it('passes on this host and reports bwrap, its version and bash', async () => {
    const found = await probeBwrap({ root: tempRoot(), user, seccomp: seccompProgram() });
    expect(found.bwrapPath).toBe(host.bwrapPath);
    expect(found.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(found.bashPath).toMatch(/\/bash$/);
  });

  it('fails closed when bwrap is missing, saying how to install it', async () => {
    const err = await probeBwrap({ bwrapPath: '/nonexistent/bwrap', root: tempRoot(), user, seccomp: seccompProgram() }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect(exitCodeOf((err as BackendUnavailableError).code)).toBe(125);
    expect((err as Error).message).toMatch(/\/nonexistent\/bwrap\) is not installed.*apt-get install bubblewrap/);
  });

  it('refuses a bwrap too old for --disable-userns', async () => {
    const root = tempRoot();
    const old = standIn(root, 'old-bwrap', 'echo "bubblewrap 0.4.1"');
    await expect(probeBwrap({ bwrapPath: old, root, user, seccomp: seccompProgram() })).rejects.toThrow(/needs bubblewrap 0\.8\.0 or later.*upgrade/);
  });

  it('names the sysctl when the kernel refuses unprivileged user namespaces', async () => {
    const root = tempRoot();
    const refusing = standIn(
      root,
      'no-userns-bwrap',
      '[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n' +
        'echo "bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces." >&2; exit 1',
    );
    const err = await probeBwrap({ bwrapPath: refusing, root, user, seccomp: seccompProgram(), facts: { ...fine, unprivilegedUsernsClone: '0' } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toMatch(/bubblewrap cannot make a sandbox on this host.*No permissions to create a new namespace.*sysctl -w kernel\.unprivileged_userns_clone=1/);
  });

  it('names what bwrap said though its exit is seen before its last words are read', async () => {
    const root = tempRoot();
    // Exits at once; what it says reaches the pipe only later (a child of it still holds stderr).
    const late = standIn(
      root,
      'late-words-bwrap',
      '[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n' +
        '{ sleep 0.5; echo "bwrap: No permissions to create a new namespace, said late." >&2; } & exit 1',
    );
    const err = await probeBwrap({ bwrapPath: late, root, user, seccomp: seccompProgram(), facts: fine }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toContain('could not start the sandbox: bwrap: No permissions to create a new namespace, said late.)');
  });

  it('fails when the syscall filter does not take hold, and passes the same bwrap with the explicit opt-out', async () => {
    const root = tempRoot();
    // Drops "--seccomp N" and runs the real bwrap: a sandbox that would start without its filter.
    const dropping = standIn(
      root,
      'no-filter-bwrap',
      'args=(); while [ $# -gt 0 ]; do if [ "$1" = --seccomp ]; then shift 2; else args+=("$1"); shift; fi; done\n' + `exec ${host.bwrapPath} "\${args[@]}"`,
    );
    await expect(probeBwrap({ bwrapPath: dropping, root, user, seccomp: seccompProgram() })).rejects.toThrow(/the syscall filter is not in force/);
    await expect(probeBwrap({ bwrapPath: dropping, root, user, seccomp: undefined })).resolves.toMatchObject({ bwrapPath: dropping });
  });
});
