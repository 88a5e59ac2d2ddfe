/* Where things are inside a bwrap sandbox. Fixed, so a command sees the same paths on every host. */

/** The sandbox's workspace: its own host dir, or the attached workspace. */
export const SANDBOX_WORKSPACE = '/workspace';
/** HOME inside: a per-sandbox host dir. */
export const SANDBOX_HOME = '/home/sandbox';
/** Private tmpfs, emptied whenever the sandbox starts again. */
export const SANDBOX_TMP = '/tmp';
/** Read-only view of the dir holding the FIFOs berth talks to processes through. */
export const SANDBOX_RUN = '/run/berth';
/** The uid and gid the sandbox's processes see for themselves (the host uid is another). */
export const SANDBOX_UID = 1000;
export const SANDBOX_GID = 1000;
export const SANDBOX_USER = 'sandbox';

/** Host dirs a sandbox is made of; `root` is berth's, the others belong to the sandbox's uid. */
export interface SandboxDirs {
  /** `$BERTH_HOME/sandboxes/bwrap/<name>`: root-owned 0700, so no one but berth walks into it. */
  readonly root: string;
  /** Bound at /workspace unless an attached workspace replaces it. */
  readonly workspace: string;
  /** Bound at /home/sandbox. */
  readonly home: string;
  /** FIFOs for spawned processes; bound read-only at /run/berth. */
  readonly run: string;
}

/** The generated /etc/passwd: the host's accounts are none of the sandbox's business. */
export function passwdFile(): string {
  return [
    'root:x:0:0:root:/root:/usr/sbin/nologin',
    `${SANDBOX_USER}:x:${SANDBOX_UID}:${SANDBOX_GID}:berth sandbox:${SANDBOX_HOME}:/bin/bash`,
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin',
    '',
  ].join('\n');
}

/** The generated /etc/group. */
export function groupFile(): string {
  return ['root:x:0:', `${SANDBOX_USER}:x:${SANDBOX_GID}:`, 'nogroup:x:65534:', ''].join('\n');
}

/** The generated /etc/hosts: loopback and the sandbox's own name, none of the host's entries. */
export function hostsFile(hostname: string): string {
  return ['127.0.0.1\tlocalhost', `127.0.1.1\t${hostname}`, '::1\tlocalhost ip6-localhost ip6-loopback', ''].join('\n');
}

/** The generated /etc/nsswitch.conf: files (the generated ones) and DNS, no host NSS module. */
export function nsswitchFile(): string {
  return ['passwd: files', 'group: files', 'shadow: files', 'hosts: files dns', 'networks: files', 'protocols: files', 'services: files', 'ethers: files', 'rpc: files', ''].join('\n');
}
