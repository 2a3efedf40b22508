/**
 * `aap-mesh start` processes, agents and CLI commands inside the lab's
 * namespaces (`ip netns exec`), awaited by their JSON lines.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MAIN, Proc, type CliResult } from '../cli-helpers.ts'
import type { Host } from './lab.ts'

export const NODE_PORT = 4001

/** Every process started in a namespace, so afterAll can end them all (`killSpawned`). */
const spawned: Proc[] = []

export async function killSpawned (): Promise<void> {
  await Promise.all(spawned.splice(0).map(async p => p.stop('SIGKILL')))
}

export function inNs (host: Host, argv: string[]): [string, string[]] {
  return ['ip', ['netns', 'exec', host.ns, ...argv]]
}

export class NetNode extends Proc {
  readonly host: Host
  readonly dataDir: string
  peerId = ''
  agentId = ''

  constructor (host: Host, dataDir: string, args: string[]) {
    const [cmd, argv] = inNs(host, [process.execPath, MAIN, 'start', '--data-dir', dataDir, '--api-port', '0', '--log-level', 'warn', '--report-connections', ...args])
    super(cmd, argv)
    spawned.push(this)
    this.host = host
    this.dataDir = dataDir
  }

  async started (): Promise<{ agentId: string, addresses: string[] }> {
    const l = await this.event('started')
    this.agentId = l.agent_id as string
    const addresses = l.addresses as string[]
    this.peerId = addresses[0]?.split('/p2p/').at(-1) ?? ''
    return { agentId: this.agentId, addresses }
  }

  /** Its TCP address on the internet side (public hosts only). */
  get tcpAddr (): string {
    return `/ip4/${this.host.ip}/tcp/${NODE_PORT}/p2p/${this.peerId}`
  }

  /** `aap-mesh <args> --data-dir <this node's>` inside its namespace. */
  async cli (args: string[]): Promise<CliResult> {
    const [cmd, argv] = inNs(this.host, [process.execPath, MAIN, ...args, '--data-dir', this.dataDir])
    const p = new Proc(cmd, argv)
    const { code } = await p.exited
    const last = p.text.at(-1)
    let json: unknown
    if (last?.startsWith('{') === true) {
      try { json = JSON.parse(last) } catch { json = undefined }
    }
    return { code, stdout: p.text.join('\n'), stderr: p.stderr, json }
  }

  /** Whether a connection to the peer is open, by its `connection` and `disconnection` lines. */
  connectedTo (peerId: string): boolean {
    let open = 0
    for (const l of this.lines) {
      if (l.peer !== peerId) continue
      if (l.event === 'connection') open++
      else if (l.event === 'disconnection') open--
    }
    return open > 0
  }

  /** Until no connection to the peer is open. */
  async disconnectedFrom (peerId: string): Promise<void> {
    let mark = this.lines.length
    while (this.connectedTo(peerId)) {
      const from = mark
      const l = await this.line(x => x.event === 'disconnection' && x.peer === peerId && this.lines.indexOf(x) >= from, `disconnection from ${peerId}`)
      mark = this.lines.indexOf(l) + 1
    }
  }

  /** The first line of this kind printed after `mark` lines. */
  async eventAfter (mark: number, name: string): Promise<Record<string, unknown>> {
    return this.line(x => x.event === name && this.lines.indexOf(x) >= mark, `"${name}" after line ${mark}`)
  }

  /** The `connection` lines to a peer, in order. */
  connectionsTo (peerId: string): Array<{ relayed: boolean, direction: string }> {
    return this.lines.filter(l => l.event === 'connection' && l.peer === peerId) as unknown as Array<{ relayed: boolean, direction: string }>
  }
}

/** A process in a host's namespace (an example agent, `events --follow`). */
export function procIn (host: Host, argv: string[]): Proc {
  const [cmd, args] = inNs(host, argv)
  const p = new Proc(cmd, args)
  spawned.push(p)
  return p
}

export class Dirs {
  private readonly dirs: string[] = []
  async make (): Promise<string> {
    const d = await mkdtemp(join(tmpdir(), 'aap-net-'))
    this.dirs.push(d)
    return d
  }

  async cleanup (): Promise<void> {
    await Promise.all(this.dirs.map(async d => rm(d, { recursive: true, force: true })))
  }
}

/** Start a node on `host` listening on TCP (and WebSockets when asked). */
export async function startNode (host: Host, dirs: Dirs, args: string[] = [], ws = false): Promise<NetNode> {
  const listen = ['--listen', `/ip4/0.0.0.0/tcp/${NODE_PORT}`, ...(ws ? ['--listen', `/ip4/0.0.0.0/tcp/${NODE_PORT + 1}/ws`] : [])]
  const n = new NetNode(host, await dirs.make(), [...listen, ...args])
  try {
    await n.started()
  } catch (err) {
    // never leave a process behind in a namespace that is about to go
    await n.stop('SIGKILL')
    throw err
  }
  return n
}
