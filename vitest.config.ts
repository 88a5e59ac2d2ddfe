import { defineConfig } from 'vitest/config';

/** CI asks for a JSON report too (BERTH_TEST_REPORT), to tell the conformance suite's written skips from others. */
const report = process.env['BERTH_TEST_REPORT'];

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Restarts the shared engine: run alone by `npm run test:engine-restart` (CI does, after npm test).
    exclude: ['test/engine/**', 'node_modules/**'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    reporters: report ? ['default', ['json', { outputFile: report }]] : ['default'],
  },
});
