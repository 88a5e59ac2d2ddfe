import { BackendUnavailableError } from '../../errors.js';
import { SECCOMP_PROGRAMS } from './seccomp-filter.generated.js';

/** Node's name for the CPU → the architecture names the generated programs use. */
const ARCH: Readonly<Record<string, string>> = { x64: 'x86_64', arm64: 'aarch64' };

/**
 * The syscall filter for this CPU (see scripts/bwrap-seccomp.py for what it refuses and where
 * the list comes from). A CPU without a program is a start-up error: the operator either runs berth
 * where one exists or turns the filter off explicitly.
 */
export function seccompProgram(nodeArch: string = process.arch): Buffer {
  const arch = ARCH[nodeArch];
  const b64 = arch === undefined ? undefined : SECCOMP_PROGRAMS[arch];
  if (b64 === undefined) {
    throw new BackendUnavailableError(
      `berth has no bwrap syscall filter for this CPU (${nodeArch}; it has ${Object.keys(SECCOMP_PROGRAMS).join(', ')}); ` +
        'generate one with scripts/bwrap-seccomp.py, or turn the filter off explicitly (bwrap.seccomp: false), which leaves ' +
        'sandboxes able to use mount, ptrace, keyctl and the other calls the filter refuses',
    );
  }
  return Buffer.from(b64, 'base64');
}
