import { readFileSync } from 'node:fs';

/** berth's version, from the package.json beside src/ and dist/ (read once, synchronously: `berth --version` loads nothing else). */
export const BERTH_VERSION: string = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
