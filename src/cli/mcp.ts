/**
 * `aap-mesh mcp`: serve the Model Context Protocol over stdio for AI tools,
 * against a running node (found like every remote command: --data-dir, or
 * --api-url and --token).
 */
import { Option, type Command } from 'commander'
import { DEFAULT_DATA_DIR } from '../constants.ts'
import { clientFor, fail, type RemoteOptions } from './remote.ts'

export function registerMcp (program: Command): Command {
  return program.command('mcp')
    .description('serve MCP over stdio (tools: discover, delegate, get_run, list_runs, resume, cancel, events, replay) against a running node')
    .option('--data-dir <dir>', 'data directory of the running node (its api.json and api-token)', `./${DEFAULT_DATA_DIR}`)
    .addOption(new Option('--api-url <url>', 'URL of the node\'s API (instead of <data dir>/api.json)').env('AAP_MESH_API_URL'))
    .addOption(new Option('--token <token>', 'API token (instead of <data dir>/api-token)').env('AAP_MESH_TOKEN'))
    .action(async (opts: Omit<RemoteOptions, 'json'>, cmd: Command) => {
      try {
        const client = await clientFor({ ...opts, json: false }, cmd)
        const { serveStdio } = await import('../mcp/server.ts')
        await serveStdio(client)
      } catch (err) {
        // stdout is the protocol's: the error goes to stderr only
        fail(err, false)
      }
    })
}
