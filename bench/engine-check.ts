import { defaultDocker } from '../src/backends/docker/engine.js';

/** The image every docker part of the bench runs (`berth image build --variant minimal` makes it). */
export const BENCH_IMAGE = process.env['BERTH_TEST_IMAGE'] ?? 'berth-sandbox:minimal';

/**
 * Why the docker parts cannot run here (no engine answers, or the bench image is missing), for
 * their SKIPPED line; undefined when they can.
 */
export async function dockerUnavailable(): Promise<string | undefined> {
  try {
    const docker = defaultDocker();
    await docker.ping();
    await docker.getImage(BENCH_IMAGE).inspect();
    return undefined;
  } catch (err) {
    return `${err instanceof Error ? err.message : String(err)}; start dockerd and run "berth image build --variant minimal"`;
  }
}
