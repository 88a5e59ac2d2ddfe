import { createHash } from 'node:crypto';
import { chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { EGRESS_CA_BUNDLE, EGRESS_CA_CERT } from '../backend.js';

/*
 * The egress proxy's CA files on the host, bound read-only into sandboxes that use the proxy: one
 * dir per content under a backend's sandbox root (docker's, which the engine reads as root;
 * bwrap's, which sandbox uids may traverse), so every sandbox binds the same files and a new CA
 * gets a new dir.
 */

/**
 * Writes the bundle and berth's CA under `root/.egress-ca/<digest>/` (once per content) and
 * returns the dir.
 */
export async function writeEgressCa(root: string, ca: { bundlePem: string; caPem: string }): Promise<string> {
  const digest = createHash('sha256').update(ca.bundlePem).update('\0').update(ca.caPem).digest('hex').slice(0, 16);
  const dir = path.join(root, '.egress-ca', digest);
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await chmod(dir, 0o755);
  for (const [file, text] of [[path.posix.basename(EGRESS_CA_BUNDLE), ca.bundlePem], [path.posix.basename(EGRESS_CA_CERT), ca.caPem]] as const) {
    // Written aside and renamed: a sandbox created meanwhile never binds a half-written file.
    const tmp = path.join(dir, `.${file}.${process.pid}`);
    await writeFile(tmp, text, { mode: 0o644 });
    await rename(tmp, path.join(dir, file));
  }
  return dir;
}
