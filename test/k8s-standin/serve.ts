/**
 * Runs the stand-in API server on its own and writes a kubeconfig for it, so anything that takes
 * a kubeconfig (berth, the suites' real-cluster mode) can be pointed at it:
 *
 *   npx tsx test/k8s-standin/serve.ts /tmp/standin.kubeconfig &
 *   BERTH_KUBECONFIG=/tmp/standin.kubeconfig BERTH_K8S_IMAGE=berth-sandbox:minimal npx vitest run test/e2e/k8s-sandboxes.test.ts
 *
 * Stops (removing its containers) on SIGINT or SIGTERM.
 */
import { writeFileSync } from 'node:fs';
import { standinImageFor } from './images.js';
import { StandinApiServer } from './server.js';

const out = process.argv[2];
if (out === undefined) {
  console.error('usage: serve.ts <kubeconfig path to write>');
  process.exit(2);
}
const server = await StandinApiServer.start({ imageFor: standinImageFor });
writeFileSync(out, server.kubeConfig('berth').exportConfig(), { mode: 0o600 });
console.log(`stand-in API server at ${server.url}; kubeconfig written to ${out}`);
const stop = (): void => {
  void server.stop().then(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
