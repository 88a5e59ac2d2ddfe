import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SECCOMP_BLOCKED, SECCOMP_PROGRAMS, SECCOMP_SOURCES } from '../../src/backends/bwrap/seccomp-filter.generated.js';
import { seccompProgram } from '../../src/backends/bwrap/seccomp.js';

const SCRIPT = 'scripts/bwrap-seccomp.py';
const GENERATED = 'src/backends/bwrap/seccomp-filter.generated.ts';

/** The compiler is there when Debian's python3 imports seccomp; the version must be the recorded one for identical bytes. */
function compiler(): { ok: true } | { ok: false; reason: string } {
  if (!existsSync('/usr/bin/python3')) return { ok: false, reason: 'no /usr/bin/python3' };
  try {
    const v = execFileSync('/usr/bin/python3', ['-c', 'import ctypes,ctypes.util,seccomp\nl=ctypes.CDLL(ctypes.util.find_library("seccomp"))\nclass V(ctypes.Structure): _fields_=[("a",ctypes.c_uint),("b",ctypes.c_uint),("c",ctypes.c_uint)]\nl.seccomp_version.restype=ctypes.POINTER(V)\nx=l.seccomp_version().contents\nprint(f"{x.a}.{x.b}.{x.c}")'], { encoding: 'utf8' }).trim();
    if (v !== SECCOMP_SOURCES.libseccomp) return { ok: false, reason: `libseccomp ${v} is installed, the program was compiled with ${SECCOMP_SOURCES.libseccomp}` };
    return { ok: true };
  } catch {
    return { ok: false, reason: 'python3-seccomp is not installed (apt-get install python3-seccomp)' };
  }
}

const c = compiler();

describe('the shipped seccomp program', () => {
  it.skipIf(!c.ok)(`is what scripts/bwrap-seccomp.py compiles from its list, byte for byte${c.ok ? '' : ` (skipped: ${c.reason})`}`, () => {
    const fresh = execFileSync('/usr/bin/python3', [SCRIPT], { encoding: 'utf8' });
    expect(fresh).toBe(readFileSync(GENERATED, 'utf8'));
  });

  it('blocks at least what the sandbox must never do', () => {
    for (const name of ['unshare', 'setns', 'clone', 'clone3', 'mount', 'umount2', 'pivot_root', 'ptrace', 'keyctl', 'add_key', 'request_key', 'ioctl', 'bpf', 'perf_event_open', 'userfaultfd', 'kexec_load', 'kexec_file_load', 'init_module', 'finit_module', 'delete_module', 'personality']) {
      expect(SECCOMP_BLOCKED, name).toContain(name);
    }
  });

  it('has a program per supported CPU, each a whole number of 8-byte BPF instructions', () => {
    for (const arch of ['x86_64', 'aarch64']) {
      const bytes = Buffer.from(SECCOMP_PROGRAMS[arch]!, 'base64');
      expect(bytes.length % 8).toBe(0);
      expect(bytes.length).toBeGreaterThan(64 * 8);
    }
    expect(seccompProgram('x64').equals(Buffer.from(SECCOMP_PROGRAMS['x86_64']!, 'base64'))).toBe(true);
  });

  it('is a start-up error on a CPU without a program, naming the opt-out', () => {
    expect(() => seccompProgram('riscv64')).toThrow(/no bwrap syscall filter for this CPU \(riscv64.*bwrap\.seccomp: false/);
  });
});
