import { join } from 'node:path';

/** The host dir of a local sandbox: `$BERTH_HOME/sandboxes/local/<dirName>`. Pure, so `explain` can name it. */
export function localSandboxDir(berthHome: string, dirName: string): string {
  return join(localSandboxesRoot(berthHome), dirName);
}

/** Where every local sandbox of an installation lives; nothing outside it is ever deleted. */
export function localSandboxesRoot(berthHome: string): string {
  return join(berthHome, 'sandboxes', 'local');
}
