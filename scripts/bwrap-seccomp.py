#!/usr/bin/python3
"""Compile berth's bubblewrap syscall filter with libseccomp and print it as a TypeScript module.

    /usr/bin/python3 scripts/bwrap-seccomp.py > src/backends/bwrap/seccomp-filter.generated.ts

Needs python3-seccomp (Debian/Ubuntu: apt-get install python3-seccomp). The output depends only on
the list below and on the libseccomp version, which it records; test/unit/bwrap-seccomp.test.ts
regenerates it and compares the bytes when the same libseccomp is installed.

The list is a blocklist over an allow-by-default filter, as flatpak applies to its bubblewrap
sandboxes. Sources, each entry tagged with where it comes from:
  flatpak  common/flatpak-run.c setup_seccomp() at flatpak 1.19.0-33-g55ec5bd (2026-08-21),
           without its "devel" and "multiarch" relaxations: the list flatpak itself maintains
           for bubblewrap sandboxes (CVE-2017-5226, CVE-2021-41133, CVE-2023-28100 among them).
  moby     the syscalls Docker's default profile (moby profiles/seccomp/default.json at
           docker v29.7.2-150-gb985e23) grants only to a process holding a capability, or never.
           A berth sandbox holds no capability, so these are refused the same way here.
  berth    additions for what the sandbox must not do to its own other processes: reading or
           writing another process's memory (the ptrace family) and taking its file descriptors.
"""

import ctypes
import ctypes.util
import errno
import os
import sys
import tempfile
import base64

import seccomp

FLATPAK_REF = 'flatpak 1.19.0-33-g55ec5bd common/flatpak-run.c setup_seccomp()'
MOBY_REF = 'moby docker-v29.7.2-150-gb985e23 profiles/seccomp/default.json'

CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
PER_LINUX = 0
AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 0, 1, 2, 10, 16

EPERM = errno.EPERM
ENOSYS = errno.ENOSYS

# (source, syscall, errno, argument condition or None)
RULES = [
    ('flatpak', 'syslog', EPERM, None),
    ('flatpak', 'uselib', EPERM, None),
    ('flatpak', 'acct', EPERM, None),
    ('flatpak', 'quotactl', EPERM, None),
    ('flatpak', 'add_key', EPERM, None),
    ('flatpak', 'keyctl', EPERM, None),
    ('flatpak', 'request_key', EPERM, None),
    ('flatpak', 'move_pages', EPERM, None),
    ('flatpak', 'mbind', EPERM, None),
    ('flatpak', 'get_mempolicy', EPERM, None),
    ('flatpak', 'set_mempolicy', EPERM, None),
    ('flatpak', 'migrate_pages', EPERM, None),
    ('flatpak', 'unshare', EPERM, None),
    ('flatpak', 'setns', EPERM, None),
    ('flatpak', 'mount', EPERM, None),
    ('flatpak', 'umount', EPERM, None),
    ('flatpak', 'umount2', EPERM, None),
    ('flatpak', 'pivot_root', EPERM, None),
    ('flatpak', 'chroot', EPERM, None),
    ('flatpak', 'clone', EPERM, seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)),
    ('flatpak', 'ioctl', EPERM, seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, TIOCSTI)),
    ('flatpak', 'ioctl', EPERM, seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, TIOCLINUX)),
    ('flatpak', 'clone3', ENOSYS, None),
    ('flatpak', 'open_tree', ENOSYS, None),
    ('flatpak', 'move_mount', ENOSYS, None),
    ('flatpak', 'fsopen', ENOSYS, None),
    ('flatpak', 'fsconfig', ENOSYS, None),
    ('flatpak', 'fsmount', ENOSYS, None),
    ('flatpak', 'fspick', ENOSYS, None),
    ('flatpak', 'mount_setattr', ENOSYS, None),
    ('flatpak', 'modify_ldt', EPERM, None),
    ('flatpak', 'perf_event_open', EPERM, None),
    ('flatpak', 'personality', EPERM, seccomp.Arg(0, seccomp.NE, PER_LINUX)),
    ('flatpak', 'ptrace', EPERM, None),
    ('moby', 'bpf', EPERM, None),
    ('moby', 'userfaultfd', EPERM, None),
    ('moby', 'kexec_load', EPERM, None),
    ('moby', 'kexec_file_load', EPERM, None),
    ('moby', 'init_module', EPERM, None),
    ('moby', 'finit_module', EPERM, None),
    ('moby', 'delete_module', EPERM, None),
    ('moby', 'create_module', EPERM, None),
    ('moby', 'get_kernel_syms', EPERM, None),
    ('moby', 'query_module', EPERM, None),
    ('moby', 'open_by_handle_at', EPERM, None),
    ('moby', 'iopl', EPERM, None),
    ('moby', 'ioperm', EPERM, None),
    ('moby', 'swapon', EPERM, None),
    ('moby', 'swapoff', EPERM, None),
    ('moby', 'reboot', EPERM, None),
    ('moby', 'settimeofday', EPERM, None),
    ('moby', 'clock_settime', EPERM, None),
    ('moby', 'lookup_dcookie', EPERM, None),
    ('moby', 'vm86', EPERM, None),
    ('moby', 'vm86old', EPERM, None),
    ('moby', 'nfsservctl', EPERM, None),
    ('moby', 'sysfs', EPERM, None),
    ('moby', '_sysctl', EPERM, None),
    ('moby', 'ustat', EPERM, None),
    ('moby', 'vhangup', EPERM, None),
    ('moby', 'fanotify_init', EPERM, None),
    ('moby', 'kcmp', EPERM, None),
    ('moby', 'pidfd_getfd', EPERM, None),
    ('moby', 'io_uring_setup', ENOSYS, None),
    ('moby', 'io_uring_enter', ENOSYS, None),
    ('moby', 'io_uring_register', ENOSYS, None),
    ('berth', 'process_vm_readv', EPERM, None),
    ('berth', 'process_vm_writev', EPERM, None),
]

# flatpak: only these socket families (AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK).
ALLOWED_FAMILIES = [AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK]

ARCHES = {'x86_64': seccomp.Arch.X86_64, 'aarch64': seccomp.Arch.AARCH64}


def libseccomp_version():
    lib = ctypes.CDLL(ctypes.util.find_library('seccomp') or 'libseccomp.so.2')

    class Version(ctypes.Structure):
        _fields_ = [('major', ctypes.c_uint), ('minor', ctypes.c_uint), ('micro', ctypes.c_uint)]

    lib.seccomp_version.restype = ctypes.POINTER(Version)
    v = lib.seccomp_version().contents
    return f'{v.major}.{v.minor}.{v.micro}'


def compile_for(arch):
    """The BPF program for one architecture, and the rules that do not exist there."""
    f = seccomp.SyscallFilter(seccomp.ALLOW)
    f.remove_arch(seccomp.Arch.NATIVE)
    f.add_arch(arch)
    absent = []
    for _source, name, err, arg in RULES:
        # libseccomp names a syscall an architecture lacks with a negative pseudo number.
        if seccomp.resolve_syscall(arch, name) < 0:
            absent.append(name)
            continue
        if arg is None:
            f.add_rule(seccomp.ERRNO(err), name)
        else:
            f.add_rule(seccomp.ERRNO(err), name, arg)
    last = -1
    for family in ALLOWED_FAMILIES:
        for blocked in range(last + 1, family):
            f.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), 'socket', seccomp.Arg(0, seccomp.EQ, blocked))
        last = family
    f.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), 'socket', seccomp.Arg(0, seccomp.GE, last + 1))
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read(), sorted(set(absent))


def ts_str(value):
    return "'" + value.replace('\\', '\\\\').replace("'", "\\'") + "'"


def main():
    programs = {}
    absent = {}
    for name, arch in ARCHES.items():
        programs[name], absent[name] = compile_for(arch)
    blocked = sorted({name for _s, name, _e, _a in RULES})
    sources = {'flatpak': FLATPAK_REF, 'moby': MOBY_REF, 'libseccomp': libseccomp_version()}
    lines = [
        '// Generated by scripts/bwrap-seccomp.py with libseccomp; do not edit. Regenerate with:',
        '//   /usr/bin/python3 scripts/bwrap-seccomp.py > src/backends/bwrap/seccomp-filter.generated.ts',
        '',
        '/** Where the blocklist comes from and what compiled it. */',
        'export const SECCOMP_SOURCES = {',
        *[f"  {k}: {ts_str(v)}," for k, v in sources.items()],
        '} as const;',
        '',
        '/** Syscalls the filter refuses (some only with certain arguments; see the script). */',
        f'export const SECCOMP_BLOCKED: readonly string[] = [{", ".join(ts_str(n) for n in blocked)}];',
        '',
        '/** Syscalls of the list that an architecture lacks (nothing to block there). */',
        'export const SECCOMP_ABSENT: Readonly<Record<string, readonly string[]>> = {',
        *[f"  {k}: [{', '.join(ts_str(n) for n in v)}]," for k, v in absent.items()],
        '};',
        '',
        '/** Classic BPF programs (struct sock_filter[], base64) for bwrap --seccomp, per architecture. */',
        'export const SECCOMP_PROGRAMS: Readonly<Record<string, string>> = {',
    ]
    for name in ARCHES:
        lines.append(f"  {name}: '{base64.b64encode(programs[name]).decode()}',")
    lines.append('};')
    sys.stdout.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
