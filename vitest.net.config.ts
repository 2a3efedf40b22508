import { defineConfig } from 'vitest/config'

// `npm run test:net`: hosts in Linux network namespaces (root only). One file at a
// time: each builds its own lab of namespaces and processes.
export default defineConfig({
  test: {
    include: ['test/net/**/*.test.ts'],
    fileParallelism: false,
    pool: 'forks',
    testTimeout: 120_000,
    hookTimeout: 120_000
  }
})
