import { defineConfig } from 'vitest/config';

// CI asks for a JSON report too, to tell written skips (by design, named "[written skip]") from
// infrastructure skips (which must fail CI).
const report = process.env['BERTH_TEST_REPORT'];

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Restarts the shared engine: run alone by `npm run test:engine-restart` (CI does, after npm test).
    exclude: ['test/engine/**', 'node_modules/**'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    ...(report ? { reporters: ['default', ['json', { outputFile: report }]] } : {}),
  },
});
