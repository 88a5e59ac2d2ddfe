import { describe, expect, it } from 'vitest';
import { diagnoseStartFailure, type HostFacts } from '../../src/backends/bwrap/host-facts.js';

const fine: HostFacts = { unprivilegedUsernsClone: undefined, maxUserNamespaces: '63000', apparmorRestrictUserns: undefined, berthSeccomp: '0', inContainer: false };

describe('diagnoseStartFailure', () => {
  it('names each setting in the way with the command that fixes it', () => {
    expect(diagnoseStartFailure('No permissions to create a new namespace', { ...fine, unprivilegedUsernsClone: '0' })).toEqual([
      expect.stringContaining('sysctl -w kernel.unprivileged_userns_clone=1'),
    ]);
    expect(diagnoseStartFailure('Creating new namespace failed: No space left on device', { ...fine, maxUserNamespaces: '0' })).toEqual([
      expect.stringContaining('sysctl -w user.max_user_namespaces='),
    ]);
    expect(diagnoseStartFailure('setting up uid map: Permission denied', { ...fine, apparmorRestrictUserns: '1' })).toEqual([
      expect.stringMatching(/AppArmor.*userns,.*apparmor_restrict_unprivileged_userns=0/),
    ]);
  });

  it("explains Docker's profile when berth itself runs in a container", () => {
    const fixes = diagnoseStartFailure("Can't mount proc on /newroot/proc: Operation not permitted", { ...fine, inContainer: true, berthSeccomp: '2' });
    expect(fixes.join(' ')).toMatch(/seccomp=unconfined.*systempaths=unconfined/);
  });

  it('points at the filter opt-out when the kernel refused the filter', () => {
    expect(diagnoseStartFailure('prctl(PR_SET_SECCOMP): Invalid argument', fine).join(' ')).toMatch(/bwrap\.seccomp: false/);
  });

  it('says nothing it does not know: no setting in the way gives no invented fix', () => {
    expect(diagnoseStartFailure('something else entirely', fine)).toEqual([]);
  });
});
