#!/usr/bin/env node
// Entry point of the `aap-mesh` command. The CLI is TypeScript, run by Node's
// type stripping (Node 24; `npm ci` installs it as the `node` devDependency).
import { run } from '../src/cli/main.ts'

await run(process.argv)
