import { defineConfig } from 'vitest/config';

/** The engine-restart suite: it stops the shared dockerd, so it runs alone, never inside npm test. */
export default defineConfig({
  test: {
    include: ['test/engine/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    fileParallelism: false,
  },
});
