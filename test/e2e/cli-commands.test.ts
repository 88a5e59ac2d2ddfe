import { COMMANDS, type CommandName } from '../../src/cli/commands/index.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BERTH_BIN, REPO, tempInstall } from '../helpers/cli.js';
import { modulesLoadedBy } from '../helpers/loaded-modules.js';

/*
 * One row per command of the CLI's command map, forced by the type: a new command does not
 * compile here until it has its row, and the row runs `berth <command> --help`.
 */
const FIRST_HELP_LINE: Record<CommandName, string> = {
  exec: 'usage: berth exec [scope flags] [--workdir DIR] [--timeout SECONDS] [--json] -- CMD...',
  explain: 'usage: berth explain [scope flags] [--json]',
  ls: 'usage: berth ls [--tenant T | --all-tenants] [--json]',
  close: 'usage: berth close [scope flags] [--json]',
  rm: 'usage: berth rm [scope flags]',
  snapshot: 'usage: berth snapshot create [scope flags] [--name N] [--json]',
  fork: 'usage: berth fork [scope flags] --to-session S2 [--from NAME] [--json]',
  config: 'usage: berth config check [--config FILE]',
  image: 'usage: berth image build [--variant debian|minimal] [--image NAME] [--force]',
  cp: 'usage: berth cp [scope flags] [--json] SRC DEST',
  media: 'usage: berth media [scope flags] [--json] PATH',
  audit: 'usage: berth audit [--egress [--refused]] [--tenant T] [--user PLATFORM:ID] [--session S] [--limit N] [--json]',
  top: 'usage: berth top [--interval S] [--once] [--calls N] [--json]',
  serve: 'usage: berth serve [--port N] [--host ADDR] [--grace SECONDS] [--config FILE]',
  token: 'usage: berth token create --tenant T [--profile P ...] [--name N]',
  mcp: 'usage: berth mcp [scope flags]',
};

/** The command modules among the loaded URLs (the map itself, commands/index.js, is not one). */
const commandModules = (urls: string[]): string[] =>
  urls.map((u) => /\/dist\/cli\/commands\/([^/]+)\.js$/.exec(u)?.[1]).filter((m): m is string => m !== undefined && m !== 'index');
const isServerOrMcp = (url: string): boolean => /\/dist\/server\//.test(url) || url.includes('/@modelcontextprotocol/sdk/');

describe('the CLI command map', () => {
  it('the table has a row for every command in the map, and no other', () => {
    expect(Object.keys(FIRST_HELP_LINE).sort()).toEqual(Object.keys(COMMANDS).sort());
  });

  it.each(Object.entries(FIRST_HELP_LINE))('berth %s --help exits 0 with its usage, loading no other command', async (name, firstLine) => {
    const r = await modulesLoadedBy([BERTH_BIN, name, '--help']);
    expect({ code: r.code, stderr: r.stderr, first: r.stdout.split('\n')[0] }).toEqual({ code: 0, stderr: '', first: firstLine });
    const file = name === 'config' ? 'config-check' : name;
    expect(commandModules(r.modules)).toEqual([file]);
  });

  it('berth --help loads no command module and no broker', async () => {
    const r = await modulesLoadedBy([BERTH_BIN, '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe('berth: the right sandbox for every agent conversation');
    expect(r.modules.some((u) => u.endsWith('/dist/cli/main.js'))).toBe(true);
    expect(commandModules(r.modules)).toEqual([]);
    expect(r.modules.filter((u) => /\/dist\/(broker|backends|server)\//.test(u))).toEqual([]);
  });

  it('berth --version prints the package version, loading nothing of berth but the version', async () => {
    const { version } = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
    const r = await modulesLoadedBy([BERTH_BIN, '--version']);
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ code: 0, stdout: `berth ${version}\n`, stderr: '' });
    // The CLI itself is not loaded: only the module that reads the version.
    expect(r.modules.filter((u) => u.includes('/dist/') || u.includes('/node_modules/'))).toEqual([expect.stringMatching(/\/dist\/kit\/version\.js$/)]);
  });

  it('berth explain loads the broker but neither the HTTP server nor the MCP SDK', async () => {
    using t = tempInstall('backend: local\n');
    const r = await modulesLoadedBy([BERTH_BIN, 'explain', '--session', 's1', '--config', `${t.dir}/berth.yaml`], t.env);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/^backend +local$/m);
    expect(r.modules.some((u) => u.endsWith('/dist/broker/broker.js'))).toBe(true);
    expect(commandModules(r.modules)).toEqual(['explain']);
    expect(r.modules.filter(isServerOrMcp)).toEqual([]);
  });
});
