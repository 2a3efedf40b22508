import { defineConfig } from 'vitest/config'

// `npm run test:net`: the tests that need root: hosts in Linux network namespaces
// (test/net), a disk of their own (test/root, a tmpfs). One file at a time: each
// builds its own lab of namespaces and processes.
export default defineConfig({
  test: {
    include: ['test/net/**/*.test.ts', 'test/root/**/*.test.ts'],
    fileParallelism: false,
    pool: 'forks',
    // a temporary folder of the run's own, removed at its end (test/private-tmpdir.ts)
    globalSetup: ['test/private-tmpdir.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000
  }
})
