#!/usr/bin/env node
// Entry point of the `aap-mesh` command. The CLI is TypeScript run by Node's
// type stripping, which needs Node >= 22; `npm ci` installs Node 24 as the
// `node` devDependency. Under an older Node (the system one, say), hand over
// to that runtime instead of failing.
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import module from 'node:module'
import { fileURLToPath } from 'node:url'

const major = Number(process.versions.node.split('.')[0])
// AAP_MESH_REEXEC=1 takes the hand-over path on any Node (the tests use it)
const handOver = major < 22 || process.env.AAP_MESH_REEXEC === '1'
if (handOver) {
  const pinned = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url))
  if (!existsSync(pinned)) {
    process.stderr.write(`aap-mesh needs Node >= 22 (this is ${process.version}); run npm ci to install it\n`)
    process.exit(1)
  }
  const env = { ...process.env }
  delete env.AAP_MESH_REEXEC
  const child = spawn(pinned, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit', env })
  // a signal sent to this launcher alone (a service manager's SIGTERM) reaches the node too; one sent to
  // the whole group (Ctrl-C) then reaches it twice, which `start` counts as one (CLI_SIGNAL_REPEAT_WINDOW_MS)
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, () => { child.kill(sig) })
  child.on('exit', (code, signal) => {
    if (signal !== null) {
      // end the way the node ended, so the caller sees the same signal
      process.removeAllListeners(signal)
      process.kill(process.pid, signal)
    } else {
      process.exit(code ?? 1)
    }
  })
} else {
  // Node's module compile cache (on disk, under the OS's temp dir unless NODE_COMPILE_CACHE names one; off with
  // NODE_DISABLE_COMPILE_CACHE=1): the TypeScript below is stripped and compiled once, not on every command
  module.enableCompileCache?.()
  const { run } = await import('../src/cli/main.ts')
  await run(process.argv)
}
