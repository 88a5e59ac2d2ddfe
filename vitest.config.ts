import { defineConfig } from 'vitest/config';
import { SlowFirstSequencer } from './test/slow-first-sequencer.js';

/** CI asks for a JSON report too (BERTH_TEST_REPORT), to tell the conformance suite's written skips from others. */
const report = process.env['BERTH_TEST_REPORT'];

/**
 * Files that must not run beside another file: they assert or change host-wide state (the docker
 * host guard's real chains; every process of uid nobody; a loop-mounted btrfs, which the mount
 * namespaces other files' sandboxes make meanwhile copy and keep busy), or time a response in
 * wall-clock terms that a busy machine could miss. They run one at a time, after all the others.
 */
const ALONE = [
  'test/e2e/egress-docker-guard.test.ts',
  'test/e2e/docker-storage-quota.test.ts',
  'test/unit/shell-fork-bomb.test.ts',
  'test/e2e/mcp-local.test.ts',
  'test/e2e/server-jobs.test.ts',
  'test/e2e/server-connections.test.ts',
];

const common = { testTimeout: 60_000, hookTimeout: 120_000, pool: 'forks' as const };

/**
 * How many files run at once (`BERTH_TEST_FORKS`, default 1; CI runs two): two on CI's two cores
 * take the run from ~39 to ~27 minutes (most of a file's time is spent waiting on an engine, an
 * sshd or a sandbox's shell). Two at a time once surfaced load races in tests that one file at a
 * time never hit (two mended in 85a0065; a run on 2026-12-05 met none). The ALONE files always
 * run after, one by one.
 */
const forks = Math.max(1, Number(process.env['BERTH_TEST_FORKS'] ?? 1) || 1);

/** test/engine restarts the shared engine: run alone by `npm run test:engine-restart` (CI does, after npm test). */
export default defineConfig({
  test: {
    reporters: report ? ['default', ['json', { outputFile: report }]] : ['default'],
    poolOptions: { forks: { maxForks: forks, minForks: 1 } },
    sequence: { sequencer: SlowFirstSequencer },
    projects: [
      { test: { ...common, name: 'together', include: ['test/**/*.test.ts'], exclude: ['test/engine/**', 'node_modules/**', ...ALONE], sequence: { groupOrder: 0 } } },
      { test: { ...common, name: 'alone', include: ALONE, poolOptions: { forks: { singleFork: true } }, sequence: { groupOrder: 1 } } },
    ],
  },
});
