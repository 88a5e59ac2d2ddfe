import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO } from './cli.js';

/** A module loader hook that appends the URL of every ES module node loads to $BERTH_LOADED_LOG. */
const HOOK = `import { appendFileSync } from 'node:fs';
export async function load(url, context, nextLoad) {
  appendFileSync(process.env.BERTH_LOADED_LOG, url + '\\n');
  return nextLoad(url, context);
}
`;

/*
 * Registers the hook before the program runs. CommonJS modules required from CommonJS do not pass
 * through ES module hooks on node 20, so the require cache is added at exit too: together the list
 * holds every module the process loaded, whichever way.
 */
const REGISTER = `import { appendFileSync } from 'node:fs';
import { createRequire, register } from 'node:module';
register('./hook.mjs', import.meta.url);
const cache = createRequire(import.meta.url).cache;
process.on('exit', () => appendFileSync(process.env.BERTH_LOADED_LOG, Object.keys(cache).map((f) => 'file://' + f + '\\n').join('')));
`;

export interface LoadedModules {
  code: number;
  stdout: string;
  stderr: string;
  /** URLs of every module the process loaded (ES modules by URL, CommonJS by file:// path). */
  modules: string[];
}

/**
 * Runs `node <args>` (from the repo root, so `import('berth')` finds this package by its name)
 * and lists every module it loaded.
 */
export async function modulesLoadedBy(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<LoadedModules> {
  const dir = mkdtempSync(join(tmpdir(), 'berth-loaded-'));
  try {
    writeFileSync(join(dir, 'hook.mjs'), HOOK);
    writeFileSync(join(dir, 'register.mjs'), REGISTER);
    const log = join(dir, 'loaded.log');
    writeFileSync(log, '');
    const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, ...args], {
        cwd: REPO, env: { ...env, BERTH_LOADED_LOG: log }, stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
      child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    });
    const modules = [...new Set(readFileSync(log, 'utf8').split('\n').filter((l) => l !== ''))];
    return { ...run, modules };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
