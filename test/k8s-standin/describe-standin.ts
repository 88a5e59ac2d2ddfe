import Dockerode from 'dockerode';
import { describe, it } from 'vitest';
import { dockerRequired, dockerStatus, ensureTestImage } from '../helpers/docker.js';

/*
 * `describe` for suites that run the stand-in API server: it needs a Docker engine for its pods.
 * Without one the suite is a visible skip carrying the reason; under BERTH_REQUIRE_DOCKER=1 it
 * fails instead.
 */

const docker = new Dockerode();
export const standinEngine = await dockerStatus(docker);

export function describeStandin(name: string, body: () => void): void {
  if (standinEngine.ok) {
    describe(name, body);
    return;
  }
  if (dockerRequired()) {
    describe(name, () => {
      it('needs a reachable engine for the stand-in API server (BERTH_REQUIRE_DOCKER=1)', () => {
        throw new Error(`BERTH_REQUIRE_DOCKER=1 but ${standinEngine.reason}`);
      });
    });
    return;
  }
  console.warn(`skipping ${name}: ${standinEngine.reason}`);
  describe.skip(`${name} (skipped: ${standinEngine.reason})`, body);
}

/** The image the stand-in runs pods with (built if missing). */
export async function ensureStandinImage(): Promise<void> {
  await ensureTestImage(docker);
}
