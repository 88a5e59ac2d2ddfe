import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The files that take longest (measured in CI, slowest first): started first, so that running two
 * files at a time does not end with one long file running alone. A fresh checkout has no vitest
 * cache of durations, and without one vitest starts larger files first, which is not the same.
 */
const SLOW_FIRST = [
  'test/e2e/backend-conformance-kubernetes.test.ts',
  'test/e2e/backend-conformance-docker.test.ts',
  'test/e2e/hibernate.test.ts',
  'test/e2e/backend-conformance-ssh.test.ts',
  'test/e2e/server-tenants.test.ts',
  'test/e2e/docker-cli.test.ts',
  'test/e2e/docker-broker.test.ts',
  'test/e2e/docker-timeout.test.ts',
  'test/e2e/files-docker.test.ts',
  'test/e2e/docker-reaper.test.ts',
  'test/e2e/snapshots-docker.test.ts',
  'test/e2e/docker-escapes.test.ts',
  'test/e2e/backend-conformance-bwrap.test.ts',
];

export class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (f: TestSpecification): number => {
      const i = SLOW_FIRST.findIndex((s) => f.moduleId.endsWith(s));
      return i === -1 ? SLOW_FIRST.length : i;
    };
    // Array.prototype.sort is stable: the rest keep vitest's own order.
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}
