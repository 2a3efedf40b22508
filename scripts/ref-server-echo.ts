/**
 * Raw libp2p echo server for the reference benchmark.
 *
 *   node scripts/ref-server-echo.ts [--listen /ip4/127.0.0.1/tcp/0]
 *
 * Prints one line {"ready":true,"addr":"<multiaddr with /p2p/>",...} once
 * listening; exits on SIGTERM/SIGINT or when stdin closes.
 */
import { announceReady, exitOnShutdown, parseArgs } from './lib/proc.ts'
import { createEchoNode, ECHO_PROTOCOL, handleEcho } from './lib/ref-echo.ts'

const args = parseArgs(process.argv.slice(2), { known: ['listen'], text: 'usage: node scripts/ref-server-echo.ts [--listen /ip4/127.0.0.1/tcp/0]' })
const listen = args.get('listen') ?? '/ip4/127.0.0.1/tcp/0'

const node = await createEchoNode([listen])
await handleEcho(node)
exitOnShutdown(async () => { await node.stop() })

const addrs = node.getMultiaddrs().map(ma => ma.toString())
const addr = addrs.find(a => a.includes('/tcp/'))
if (addr === undefined) throw new Error(`no TCP listen address (got ${JSON.stringify(addrs)})`)

announceReady({ kind: 'libp2p-echo', addr, addrs, peerId: node.peerId.toString(), protocol: ECHO_PROTOCOL, pid: process.pid })
