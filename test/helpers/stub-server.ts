import type { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import { tempDir } from './temp-dir.js';

/*
 * A real `BerthServer` (HTTP, MCP, tokens in a real state file) over a stub broker: for tests of
 * the HTTP edge itself (routing, the error table), where what the broker does is the setup. A
 * broker method the test did not stub throws a plain Error (a 500).
 */

export interface StubServer {
  url: string;
  /** A bearer token of tenant `acme` (profile default). */
  token: string;
  server: BerthServer;
}

/**
 * A broker with the given config whose methods are `methods` (`files` and `jobs` given as
 * objects of their own methods); anything else throws. Its reapers run nothing.
 */
export function stubBroker(methods: Record<string, unknown> = {}, config: Record<string, unknown> = {}): Broker {
  const { files = {}, jobs = {}, ...rest } = methods as { files?: Record<string, unknown>; jobs?: Record<string, unknown> };
  return strict('broker', {
    config: parseConfig(config), berthHome: tempDir('berth-stub-home-'),
    reapers: { every: () => () => undefined },
    observe: () => () => undefined,
    files: strict('broker.files', files), jobs: strict('broker.jobs', jobs),
    ...rest,
  }) as unknown as Broker;
}

function strict(name: string, target: Record<string | symbol, unknown>): unknown {
  return new Proxy(target, {
    get: (t, key) => (key in t ? t[key] : () => {
      throw new Error(`stub broker: ${name}.${String(key)} was called`);
    }),
  });
}

/** Starts the server on a free loopback port; it is closed when the current test finishes. */
export async function startStubServer(broker: Broker, onFinished: (fn: () => Promise<void>) => void): Promise<StubServer> {
  const tokens = TokenStore.open(broker.berthHome);
  const { token } = tokens.create('acme');
  const server = await BerthServer.start({ broker, tokens, port: 0 });
  onFinished(async () => {
    await server.close({ graceMs: 1_000 });
    tokens.close();
  });
  return { url: server.url, token, server };
}
