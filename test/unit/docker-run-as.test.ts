import { describe, expect, it } from 'vitest';
import { chooseRunAs, userOption } from '../../src/backends/docker/run-as.js';
import { PolicyRefusedError } from '../../src/errors.js';

const ws = (uid: number, gid = uid) => ({ what: 'the attached workspace /w', uid, gid });
const vol = (uid: number, gid = uid) => ({ what: 'docker.volumes entry /v:/v', uid, gid });

describe('who a docker sandbox runs as (set-id files in host binds)', () => {
  it('no rw binds keep the image root; a non-root owner is taken with its dir group', () => {
    expect(chooseRunAs({ binds: [], userns: false })).toBeUndefined();
    expect(chooseRunAs({ binds: [ws(1000, 50)], userns: false })).toEqual({ uid: 1000, gid: 50 });
    expect(chooseRunAs({ binds: [ws(1000, 1000), vol(1000, 7)], userns: false })).toEqual({ uid: 1000, gid: 1000 });
  });

  it('a read-write bind owned by root is refused, never written as root, naming the dir and both fixes', () => {
    for (const binds of [[ws(0)], [vol(0)], [ws(0), vol(1000)], [ws(1000), vol(0)]]) {
      const run = () => chooseRunAs({ binds, userns: false });
      expect(run).toThrow(PolicyRefusedError);
      expect(run).toThrow(/is owned by root and would be bound read-write: .*set-uid-root.*chown -R <uid>:<gid> DIR.*or bind it read-only$/);
    }
    expect(() => chooseRunAs({ binds: [vol(0)], userns: false })).toThrow(/^docker\.volumes entry \/v:\/v is owned by root/);
    // Under user-namespace remapping container root is an unprivileged host uid.
    expect(chooseRunAs({ binds: [ws(0)], userns: true })).toBeUndefined();
  });

  it('two different non-root owners are refused, naming both', () => {
    const run = () => chooseRunAs({ binds: [ws(1000), vol(2000)], userns: false });
    expect(run).toThrow(PolicyRefusedError);
    expect(run).toThrow(/the attached workspace \/w belongs to uid 1000 but docker\.volumes entry \/v:\/v belongs to uid 2000/);
  });

  it("berth's own dirs count when berth is not root (it cannot hand them over)", () => {
    const own = { what: "berth's own sandbox dir /h", uid: 1000, gid: 1000 };
    expect(chooseRunAs({ binds: [], ownDirs: own, userns: false })).toEqual({ uid: 1000, gid: 1000 });
    expect(() => chooseRunAs({ binds: [ws(1001)], ownDirs: own, userns: false })).toThrow(/uid 1001 .* uid 1000/);
    expect(chooseRunAs({ binds: [], ownDirs: { ...own, uid: 0 }, userns: false })).toBeUndefined();
  });

  it('runAsHostUser is one more owner; under userns remapping nothing but it applies', () => {
    expect(chooseRunAs({ binds: [], userns: false, hostUser: { uid: 1234, gid: 5 } })).toEqual({ uid: 1234, gid: 5 });
    expect(chooseRunAs({ binds: [], userns: false, hostUser: { uid: 0, gid: 0 } })).toEqual({ uid: 0, gid: 0 });
    expect(() => chooseRunAs({ binds: [ws(0)], userns: false, hostUser: { uid: 0, gid: 0 } })).toThrow(/owned by root/);
    expect(chooseRunAs({ binds: [ws(1000)], userns: false, hostUser: { uid: 0, gid: 0 } })).toEqual({ uid: 1000, gid: 1000 });
    expect(() => chooseRunAs({ binds: [ws(1000)], userns: false, hostUser: { uid: 1234, gid: 5 } })).toThrow(/runAsHostUser/);
    expect(chooseRunAs({ binds: [ws(1000), vol(2000)], userns: true })).toBeUndefined();
    expect(chooseRunAs({ binds: [ws(1000)], userns: true, hostUser: { uid: 1234, gid: 5 } })).toEqual({ uid: 1234, gid: 5 });
  });

  it('renders the container User option', () => {
    expect(userOption(undefined)).toBe('');
    expect(userOption({ uid: 1000, gid: 50 })).toBe('1000:50');
  });
});
