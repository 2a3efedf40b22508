/**
 * The aap-mesh command line. This file only wires commands together: each
 * command lives in its own module and registers itself on the program
 * (`registerX(program)`), so adding one is a new module and one line here.
 */
import { Command, CommanderError } from 'commander'
import pkg from '../../package.json' with { type: 'json' }
import { registerRemoteCommands } from './commands.ts'
import { registerConformance } from './conformance.ts'
import { EXIT_USAGE } from './remote.ts'
import { registerStart } from './start.ts'
import { registerMcp } from './mcp.ts'
import { registerUi } from './ui.ts'
import { registerArtifact } from './artifact.ts'
import { useNodeBufferPool } from '../wire/buffer-pool.ts'

export function buildProgram (): Command {
  const program = new Command()
    .name('aap-mesh')
    .description('a broker-less agent mesh node for AAP 0.1.0-draft, over libp2p')
    .version(pkg.version)
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText('after', `
Every command but start and conformance drives a running node through its local API, found in
--data-dir (api.json, api-token) or given with --api-url and --token.
Exit codes: 0 done (or the reader of its output went away), 1 the node refused (its AAP
error code is printed), the run send waited for failed or blocked, a request timed out
or the output could not be written, 2 wrong arguments, 3 no node reachable (or its
stream ended first, or it answered what is not the API's), 130 a wait ended by Ctrl-C.`)
  registerStart(program)
  registerRemoteCommands(program)
  registerMcp(program)
  registerConformance(program)
  registerUi(program)
  registerArtifact(program)
  return program
}

/** The program and every command below it. */
export function allCommands (program: Command): Command[] {
  return [program, ...program.commands.flatMap(c => allCommands(c))]
}

/**
 * Run the command line on `argv` (node's own argv: the program, the script,
 * then the arguments). Commander's own parse errors (unknown option, bad
 * choice, missing argument) exit with EXIT_USAGE like the commands' own
 * argument errors; help and version exit 0.
 */
export async function run (argv: readonly string[] = process.argv): Promise<void> {
  const program = buildProgram()
  for (const c of allCommands(program)) c.exitOverride()
  try {
    await program.parseAsync([...argv])
  } catch (err) {
    if (!(err instanceof CommanderError)) throw err
    process.exitCode = err.exitCode === 0 ? 0 : EXIT_USAGE
  }
}

if (import.meta.main) {
  // this process runs a node: small buffers on small slabs (src/wire/buffer-pool.ts)
  useNodeBufferPool()
  await run()
}
