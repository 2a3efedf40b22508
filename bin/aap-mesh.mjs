#!/usr/bin/env node
// Entry point of the `aap-mesh` command. The CLI is TypeScript run by Node's
// type stripping, which needs Node >= 22; `npm ci` installs Node 24 as the
// `node` devDependency. Under an older Node (the system one, say), hand over
// to that runtime instead of failing.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const major = Number(process.versions.node.split('.')[0])
if (major < 22) {
  const pinned = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url))
  if (!existsSync(pinned)) {
    process.stderr.write(`aap-mesh needs Node >= 22 (this is ${process.version}); run npm ci to install it\n`)
    process.exit(1)
  }
  const r = spawnSync(pinned, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' })
  process.exit(r.status ?? 1)
} else {
  const { run } = await import('../src/cli/main.ts')
  await run(process.argv)
}
