import { describe, expect, it } from 'vitest';
import { keepCommand } from '../../src/cli/commands/keep.js';
import { UsageError } from '../../src/errors.js';
import type { CliIo } from '../../src/cli/io.js';

/*
 * `berth __keep` is started by berth itself with the sandboxes to keep on its stdin; anything else
 * there is refused before a broker opens, saying it is not meant to be run by hand.
 */

const io: CliIo = { env: {}, cwd: '/', out: () => undefined, err: () => undefined };

describe('berth __keep input', () => {
  it.each([
    ['not JSON', 'hello'],
    ['no sandboxes', '{}'],
    ['an unknown key in a scope (a token is never handed on)', JSON.stringify({ sandboxes: [{ scope: { tenant: 't', profile: 'p', token: { id: 'tok_x' } }, digest: 'd', key: 'k' }] })],
    ['a sandbox without its digest', JSON.stringify({ sandboxes: [{ scope: { tenant: 't', profile: 'p' }, key: 'k' }] })],
  ])('%s is a usage error naming what it reads', async (_name, input) => {
    const err = await keepCommand([], io, () => Promise.resolve(input)).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as Error).message).toMatch(/^__keep reads the sandboxes to keep as JSON on stdin, as berth writes it \(.+\); it is not meant to be run by hand$/);
  });

  it('a listening socket named by a descriptor this process was not passed is refused before anything opens (it could be one of its own)', async () => {
    const input = JSON.stringify({ sandboxes: [{ scope: { tenant: 't', profile: 'p' }, digest: 'd', key: 'session:s', listener: { ref: 'c1', fd: 1000, ns: 'net:[1]', holder: 'h' } }] });
    const err = await keepCommand([], io, () => Promise.resolve(input)).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as Error).message).toBe('__keep: descriptor 1000 named for sandbox session:s is not a socket passed to this process; it is not meant to be run by hand');
  });
});
