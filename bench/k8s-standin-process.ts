import { writeFileSync } from 'node:fs';
import { StandinApiServer } from '../test/k8s-standin/server.js';

/*
 * The stand-in API server in a process of its own, as a real API server is: in berth's process
 * its relaying (WebSocket frames, the engine's attach streams) would run on berth's event loop
 * and be counted as berth's time. Writes a kubeconfig to argv[2], prints `ready`, and stops
 * (removing every container it started) when its stdin ends. HTTPS with its own CA, or plain
 * HTTP when argv[3] is `--plain` (to measure what TLS costs).
 */
const server = await StandinApiServer.start({ tls: process.argv[3] !== '--plain' });
writeFileSync(process.argv[2] as string, server.kubeConfig('berth').exportConfig(), { mode: 0o600 });
process.stdout.write('ready\n');
process.stdin.resume();
process.stdin.on('end', () => {
  void server.stop().finally(() => process.exit(0));
});
