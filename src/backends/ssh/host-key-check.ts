import { appendFile, readFile } from 'node:fs/promises';
import { ConfigError } from '../../errors.js';
import { HostKeyError, endpointOf } from './errors.js';
import {
  fingerprintOf,
  formatKnownHost,
  hostEntryName,
  hostKeyAlgorithmsFor,
  judgeHostKey,
  keyTypeOf,
  parseKnownHosts,
  type KnownHost,
} from './known-hosts.js';

export interface HostKeyCheckOptions {
  host: string;
  port: number;
  /** The known_hosts file to check against (and to append to on first use). */
  knownHostsFile: string;
  /** Record an unknown host's key (as a hashed line) instead of refusing it. Never for a changed key. */
  trustOnFirstUse: boolean;
}

/**
 * The host key decision for one connection attempt: the known_hosts file as it is now (read
 * afresh for every connection, so an operator's edit takes effect at the next connect), the host
 * key algorithms to offer, and the verdict on the key the host presents.
 *
 * @example
 * const check = await HostKeyCheck.load({ host: 'build1', port: 22, knownHostsFile, trustOnFirstUse: false });
 * new Client().connect({ ..., algorithms: { serverHostKey: check.algorithms() },
 *   hostVerifier: (key, verify) => check.verify(key).then(() => verify(true), (e) => { failure = e; verify(false); }) });
 */
export class HostKeyCheck {
  private constructor(
    private readonly opts: HostKeyCheckOptions,
    private readonly entries: readonly KnownHost[],
    private readonly fileExists: boolean,
    /** The file does not end with a newline: an appended line must start a new one. */
    private readonly unterminated: boolean,
  ) {}

  static async load(opts: HostKeyCheckOptions): Promise<HostKeyCheck> {
    let text = '';
    let exists = true;
    try {
      text = await readFile(opts.knownHostsFile, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') {
        throw new ConfigError(`cannot read ssh.knownHosts file ${opts.knownHostsFile} (${code ?? String(err)}); make it readable by berth's user`, { cause: err });
      }
      exists = false;
    }
    return new HostKeyCheck(opts, parseKnownHosts(text), exists, text !== '' && !text.endsWith('\n'));
  }

  /** Name the host is recorded under in known_hosts: `host`, or `[host]:port` off port 22. */
  get entryName(): string {
    return hostEntryName(this.opts.host, this.opts.port);
  }

  /** Host key algorithms to offer (types already trusted for this host); empty = ssh2's defaults. */
  algorithms(): string[] {
    return hostKeyAlgorithmsFor(this.entries, this.entryName);
  }

  /**
   * Resolves when `blob` may be trusted (appending it first under trust-on-first-use); rejects
   * with a `HostKeyError` naming the fingerprint and the exact way to trust it otherwise.
   */
  async verify(blob: Buffer): Promise<void> {
    const verdict = judgeHostKey(this.entries, this.entryName, blob);
    const where = endpointOf(this.opts.host, this.opts.port);
    const file = this.opts.knownHostsFile;
    const presented = `${keyTypeOf(blob) ?? 'unknown-type'} key ${fingerprintOf(blob)}`;
    const line = formatKnownHost(this.entryName, blob, { hashed: false });
    switch (verdict.kind) {
      case 'trusted':
        return;
      case 'revoked':
        throw new HostKeyError(
          'revoked',
          `SSH host ${where} presents ${presented}, which ${file} line ${verdict.entry.line} marks @revoked; berth refuses to connect. ` +
            'Give the host a new host key, check its fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and add that key to the file',
        );
      case 'changed': {
        const old = verdict.entries.map((e) => `line ${e.line} (${fingerprintOf(e.key)})`).join(', ');
        throw new HostKeyError(
          'changed',
          `SSH host key of ${where} CHANGED: it presents ${presented}, but ${file} holds another ${verdict.entries[0]?.keyType ?? ''} key for it at ${old}. ` +
            'Someone may be intercepting the connection, or the host was reinstalled; berth refuses to connect. If the host was reinstalled, ' +
            `check the new fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), remove the old entry ` +
            `(ssh-keygen -R '${this.entryName}' -f ${file}) and add this line to ${file}:\n${line}`,
        );
      }
      case 'cert-authority-only':
        throw new HostKeyError(
          'unsupported',
          `${file} line ${verdict.entry.line} trusts a certificate authority (@cert-authority) for ${where}, but berth does not verify host ` +
            `certificates; the host presents ${presented}. Check that fingerprint on the host and add its plain key to ${file}:\n${line}`,
        );
      case 'unknown':
        if (this.opts.trustOnFirstUse) {
          await this.record(blob);
          return;
        }
        throw new HostKeyError(
          'unknown',
          `SSH host ${where} is not in ${file}${this.fileExists ? '' : ' (the file does not exist)'}; it presents ${presented}. ` +
            'Check that fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then trust it by adding this line to ' +
            `${file}:\n${line}\n(ssh-keyscan ${this.opts.port === 22 ? '' : `-p ${this.opts.port} `}-t ${keyTypeOf(blob) ?? 'ed25519'} ${this.opts.host} prints it), ` +
            'or turn on trust on first use for this host in the ssh settings',
        );
    }
  }

  /** Trust on first use: the key is appended as a hashed line (0600 when the file is new). */
  private async record(blob: Buffer): Promise<void> {
    const line = formatKnownHost(this.entryName, blob, { hashed: true });
    try {
      await appendFile(this.opts.knownHostsFile, `${this.unterminated ? '\n' : ''}${line}\n`, { mode: 0o600 });
    } catch (err) {
      throw new ConfigError(
        `cannot record the host key of ${endpointOf(this.opts.host, this.opts.port)} in ${this.opts.knownHostsFile} (trust on first use): ` +
          `${(err as NodeJS.ErrnoException).code ?? String(err)}; make the file (or its directory) writable by berth's user`,
        { cause: err },
      );
    }
  }
}
