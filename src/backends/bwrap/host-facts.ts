import { existsSync, readFileSync } from 'node:fs';

/** Kernel and host settings that decide whether bwrap can make a sandbox here. */
export interface HostFacts {
  /** kernel.unprivileged_userns_clone (Debian/Ubuntu kernels before 6.x; absent elsewhere). */
  unprivilegedUsernsClone: string | undefined;
  /** user.max_user_namespaces. */
  maxUserNamespaces: string | undefined;
  /** kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10 and later). */
  apparmorRestrictUserns: string | undefined;
  /** The `Seccomp:` mode of berth's own process: 2 when berth itself runs under a filter (a container). */
  berthSeccomp: string | undefined;
  /** /.dockerenv or /run/.containerenv exists. */
  inContainer: boolean;
}

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
}

export function readHostFacts(): HostFacts {
  const status = read('/proc/self/status') ?? '';
  return {
    unprivilegedUsernsClone: read('/proc/sys/kernel/unprivileged_userns_clone'),
    maxUserNamespaces: read('/proc/sys/user/max_user_namespaces'),
    apparmorRestrictUserns: read('/proc/sys/kernel/apparmor_restrict_unprivileged_userns'),
    berthSeccomp: /^Seccomp:\s*(\d+)/m.exec(status)?.[1],
    inContainer: existsSync('/.dockerenv') || existsSync('/run/.containerenv'),
  };
}

/**
 * What to do about a sandbox that bwrap could not make, from bwrap's message and the host's
 * settings. Pure. Lists every setting found in the way; when none is, says what bwrap said.
 */
export function diagnoseStartFailure(bwrapMessage: string, facts: HostFacts): string[] {
  const fixes: string[] = [];
  if (facts.unprivilegedUsernsClone === '0') {
    fixes.push('unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0): sysctl -w kernel.unprivileged_userns_clone=1');
  }
  if (facts.maxUserNamespaces === '0') {
    fixes.push('user namespaces are off (user.max_user_namespaces = 0): sysctl -w user.max_user_namespaces=15000');
  }
  if (facts.apparmorRestrictUserns === '1') {
    fixes.push(
      'AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1): give bwrap an ' +
        'AppArmor profile that allows them (an /etc/apparmor.d/bwrap profile with "userns,"), or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0',
    );
  }
  if (facts.inContainer || facts.berthSeccomp === '2') {
    fixes.push(
      'berth runs inside a container whose seccomp profile and /proc masking refuse user namespaces and a new /proc: run that ' +
        'container with --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined ' +
        '(or a seccomp profile that allows clone/unshare with CLONE_NEWUSER), or run berth on the host',
    );
  }
  if (/seccomp/i.test(bwrapMessage)) {
    fixes.push('the kernel refused the syscall filter: use a kernel built with CONFIG_SECCOMP_FILTER, or turn the filter off explicitly (bwrap.seccomp: false)');
  }
  if (fixes.length === 0 && /proc/.test(bwrapMessage)) {
    fixes.push('a new /proc could not be mounted (a masked or read-only /proc, as in containers): mount an unmasked /proc where berth runs');
  }
  return fixes;
}
