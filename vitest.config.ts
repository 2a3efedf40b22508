import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // the network-namespace tests need root and run on their own: npm run test:net
    exclude: ['test/net/**', 'test/root/**', 'node_modules/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // real libp2p nodes on 2 cores: run files one at a time so timeouts mean bugs, not load
    fileParallelism: false,
    pool: 'forks',
    // a temporary folder of the run's own, removed at its end (test/private-tmpdir.ts)
    globalSetup: ['test/private-tmpdir.ts']
  }
})
