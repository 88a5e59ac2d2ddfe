import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

/*
 * The floor plan's rule set (.dependency-cruiser.cjs), run as `npm test` runs it (the package's
 * `floors` script), over a small tree laid out like src/ and then over src/ itself. Each
 * deliberate violation is written into a fresh copy of a tree that passes, so what is reported
 * is the violation's and nothing else's.
 */

const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const FLOORS_SCRIPT = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['floors']!;

interface FloorsRun {
  code: number;
  /** What it printed, with its line wrapping undone. */
  output: string;
  /** `rule: from → to` for each violation (`rule: a → b → a` for a circle), as the report names it. */
  violations: string[];
}

function runFloors(cwd: string): Promise<FloorsRun> {
  return new Promise((resolve) => {
    const env = { ...process.env, PATH: `${join(REPO, 'node_modules', '.bin')}:${process.env['PATH'] ?? ''}` };
    execFile('sh', ['-c', FLOORS_SCRIPT], { cwd, env, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const report = stdout + stderr;
      const output = report.replace(/\s+/g, ' ');
      const violations = [...report.matchAll(/^ {2}error (\S+): ((?:\S+ →\s+)*\S+)$/gm)].map((m) => `${m[1]}: ${m[2]!.replace(/\s+→\s+/g, ' → ')}`);
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, output, violations });
    });
  });
}

/** A tree that passes: one file on each floor the cases touch, each reached from the library's front door. */
const CLEAN_TREE: Record<string, string> = {
  'src/errors.ts': 'export class BerthError extends Error {}\n',
  'src/config/types.ts': "import { BerthError } from '../errors.js';\nexport interface CoreSettings { backend: string }\nexport const configError = BerthError;\n",
  'src/config/defaults.ts': "import type { CoreSettings } from './types.js';\nexport const DEFAULTS: CoreSettings = { backend: 'docker' };\n",
  'src/policy/mounts.ts': "import type { CoreSettings } from '../config/types.js';\nexport const mounts = (s: CoreSettings): string[] => [s.backend];\n",
  'src/shell/protocol.ts': "export const NONCE_BYTES = 16;\n",
  'src/backends/backend.ts': "export interface Backend { readonly name: string }\n",
  'src/backends/docker/module.ts': "import type { Backend } from '../backend.js';\nexport const docker: Backend = { name: 'docker' };\n",
  'src/backends/registry.ts': "import { docker } from './docker/module.js';\nexport const MODULES = [docker];\n",
  'src/broker/sessions.ts': 'export interface SessionInfo { id: string }\nexport const sessions = new Map<string, SessionInfo>();\n',
  'src/broker/broker.ts': [
    "import { DEFAULTS } from '../config/defaults.js';",
    "import { mounts } from '../policy/mounts.js';",
    "import { NONCE_BYTES } from '../shell/protocol.js';",
    "import { MODULES } from '../backends/registry.js';",
    "import { sessions } from './sessions.js';",
    'export const broker = { mounts: mounts(DEFAULTS), nonce: NONCE_BYTES, modules: MODULES, sessions };',
    '',
  ].join('\n'),
  'src/index.ts': "export { broker } from './broker/broker.js';\n",
  'tsconfig.json': JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true }, include: ['src'] }),
};

let root: string;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'berth-floors-'));
  writeTree(CLEAN_TREE);
  copyFileSync(join(REPO, '.dependency-cruiser.cjs'), join(root, '.dependency-cruiser.cjs'));
});

afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

function writeTree(files: Record<string, string>): void {
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
}

describe('the floor plan, checked by `npm run floors`', () => {
  it('passes a tree that keeps to it', async () => {
    const run = await runFloors(root);
    expect(run.violations).toEqual([]);
    expect(run.code).toBe(0);
  });

  it('reports a circle, with the reason the rule gives', async () => {
    writeTree({
      'src/config/types.ts': [
        "import { BerthError } from '../errors.js';",
        "import { DEFAULTS } from './defaults.js';",
        'export interface CoreSettings { backend: string }',
        'export const configError = BerthError;',
        'export const fallback = () => DEFAULTS;',
        '',
      ].join('\n'),
    });
    const run = await runFloors(root);
    expect(run.code).not.toBe(0);
    // One finding per circle, named from whichever of its files the cruise reached first.
    expect(run.violations).toHaveLength(1);
    expect([
      'no-circular: src/config/defaults.ts → src/config/types.ts → src/config/defaults.ts',
      'no-circular: src/config/types.ts → src/config/defaults.ts → src/config/types.ts',
    ]).toContain(run.violations[0]);
    expect(run.output).toContain('two files that import each other (even for a type) are one room with two doors');
  });

  it('reports an import from a lower floor to a higher one (policy importing the shell)', async () => {
    writeTree({
      'src/policy/mounts.ts': [
        "import type { CoreSettings } from '../config/types.js';",
        "import { NONCE_BYTES } from '../shell/protocol.js';",
        'export const mounts = (s: CoreSettings): string[] => [s.backend, String(NONCE_BYTES)];',
        '',
      ].join('\n'),
    });
    const run = await runFloors(root);
    expect(run.code).not.toBe(0);
    expect(run.violations).toEqual(['floor-policy: src/policy/mounts.ts → src/shell/protocol.ts']);
    expect(run.output).toContain('an import only goes down the floors');
  });

  it('reports a backend importing the broker, by the floor rule and the seam rule', async () => {
    writeTree({
      'src/backends/docker/module.ts': [
        "import type { Backend } from '../backend.js';",
        "import { sessions } from '../../broker/sessions.js';",
        "export const docker: Backend = { name: `docker${sessions.size}` };",
        '',
      ].join('\n'),
    });
    const run = await runFloors(root);
    expect(run.code).not.toBe(0);
    expect(run.violations).toEqual([
      'floor-backends: src/backends/docker/module.ts → src/broker/sessions.ts',
      'backends-know-no-broker: src/backends/docker/module.ts → src/broker/sessions.ts',
    ]);
    expect(run.output).toContain('a backend never imports it');
  });

  it('reports an upward import that is only a type (the compiler erases it; the design does not)', async () => {
    writeTree({
      'src/config/types.ts': [
        "import { BerthError } from '../errors.js';",
        "import type { SessionInfo } from '../broker/sessions.js';",
        'export interface CoreSettings { backend: string; lastSession?: SessionInfo }',
        'export const configError = BerthError;',
        '',
      ].join('\n'),
    });
    const run = await runFloors(root);
    expect(run.code).not.toBe(0);
    expect(run.violations).toEqual(['floor-config: src/config/types.ts → src/broker/sessions.ts']);
  });
});

describe('src/', () => {
  it('keeps to the floor plan: no circle, no upward import, every seam rule holds', async () => {
    const run = await runFloors(REPO);
    expect(run.violations).toEqual([]);
    expect(run.code).toBe(0);
    expect(run.output).toContain('no dependency violations found');
  }, 120_000);
});
