import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { COMMANDS, type CommandName } from '../../src/cli/commands/index.js';
import type { CliIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { REPO } from '../helpers/cli.js';

/*
 * `berth --help` is the CLI's index: every flag any command accepts appears in it and in the
 * command's own help. The flags a command accepts are found by asking its parser (an unknown flag
 * is a usage error), for every flag name any command module declares.
 */

function captureIo(): CliIo & { text: () => string } {
  let out = '';
  return { env: {}, cwd: REPO, out: (t) => (out += t), err: (t) => (out += t), text: () => out };
}

async function helpOf(argv: string[]): Promise<string> {
  const io = captureIo();
  expect(await main(argv, io)).toBe(0);
  return io.text();
}

/** Every `name: { type: ... }` option declared anywhere in the CLI's sources. */
function declaredFlagNames(): string[] {
  const dir = join(REPO, 'src/cli');
  const files = [join(dir, 'args.ts'), ...readdirSync(join(dir, 'commands')).map((f) => join(dir, 'commands', f))];
  const names = new Set<string>();
  for (const f of files) for (const m of readFileSync(f, 'utf8').matchAll(/\b([a-z][a-zA-Z-]*): \{ type: '(?:string|boolean)'/g)) names.add(m[1]!);
  return [...names].sort();
}

/** The flags `command`'s parser accepts, among `names`. */
async function acceptedFlags(command: CommandName, names: string[]): Promise<string[]> {
  const run = await COMMANDS[command]();
  const lead = command === 'token' ? ['create'] : [];
  const accepted: string[] = [];
  for (const name of names) {
    let known = false;
    for (const form of [[`--${name}=x`], [`--${name}`]]) {
      try {
        await run([...lead, ...form, '--help'], captureIo());
        known = true;
      } catch (err) {
        if (!/Unknown option|does not take an argument/.test(String(err))) known = true;
      }
    }
    if (known) accepted.push(name);
  }
  return accepted;
}

describe('berth --help', () => {
  it('names every command of the map', async () => {
    const help = await helpOf(['--help']);
    for (const name of Object.keys(COMMANDS)) expect(help).toMatch(new RegExp(`^  ${name} `, 'm'));
  });

  it('lists the exit codes', async () => {
    const help = await helpOf(['--help']);
    for (const code of ['1', '2', '124', '125', '141']) expect(help).toMatch(new RegExp(`^  ${code} +\\S`, 'm'));
  });

  it.each(Object.keys(COMMANDS) as CommandName[])('every flag "berth %s" accepts is in its own help and in berth --help', async (command) => {
    const names = declaredFlagNames();
    const accepted = (await acceptedFlags(command, names)).filter((n) => n !== 'help' && n !== 'config');
    expect(accepted.length).toBeGreaterThan(command === 'rm' || command === 'config' ? -1 : 0);
    const own = await helpOf([command, '--help']);
    const top = await helpOf(['--help']);
    expect(accepted.filter((n) => !own.includes(`--${n}`))).toEqual([]);
    expect(accepted.filter((n) => !top.includes(`--${n}`))).toEqual([]);
  });
});
