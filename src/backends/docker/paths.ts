/** Where a container sandbox keeps things, inside it. */

/** The working dir: a host dir bound here (attached workspace, volume, persistent dir) or a tmpfs. */
export const WORKSPACE = '/workspace';
export const HOME = '/root';
/** In-container dir for berth's own files (shell snapshots); under home, never the workspace. */
export const STATE_DIR = '/root/.berth';
