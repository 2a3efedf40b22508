import { createServer, type AddressInfo } from 'node:net'
import { AapError } from '../src/errors.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import type { RunContext } from '../src/runs/runtime.ts'
import type { RunHandler } from '../src/runs/types.ts'
import { DHT_PROTOCOL } from '../src/constants.ts'
import { createMeshNode, type MeshNode, type MeshNodeOptions } from '../src/node.ts'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { MemoryDatastore } from 'datastore-core'
import { createHost, type DhtTuning, type MeshHost } from '../src/wire/host.ts'
import { silentLogger } from '../src/logger.ts'

let memCounter = 0

export interface MeshOptions {
  transport?: 'memory' | 'tcp'
  /** Node i joins through node `bootstrapOf(i)` (default: a random earlier node). */
  bootstrapOf?: (i: number) => number
  nodeOptions?: (i: number) => Partial<MeshNodeOptions>
}

/** Start `n` real nodes, each joining through another one: no central server. */
export async function startMesh (n: number, opts: MeshOptions = {}): Promise<MeshNode[]> {
  const nodes: MeshNode[] = []
  for (let i = 0; i < n; i++) {
    const listen = opts.transport === 'tcp' ? ['/ip4/127.0.0.1/tcp/0'] : [`/memory/aap-test-${process.pid}-${memCounter++}`]
    const node = await createMeshNode({ listen, localMesh: true, ...(opts.nodeOptions?.(i) ?? {}) })
    await node.start()
    if (i > 0) {
      const j = opts.bootstrapOf?.(i) ?? Math.floor(Math.random() * i)
      const other = nodes[j]
      if (other === undefined) throw new Error('bad bootstrap index')
      const joined = await node.join(other.addresses)
      if (joined === 0) throw new Error(`node ${i} could not join node ${j}`)
    }
    nodes.push(node)
  }
  await waitForRouting(nodes)
  return nodes
}

/** Resolve when every node knows at least `min` peers that speak the mesh's DHT protocol. */
export async function waitForRouting (nodes: MeshNode[], min = Math.min(nodes.length - 1, 3)): Promise<void> {
  await Promise.all(nodes.map(async node => {
    const enough = async (): Promise<boolean> => {
      const peers = await node.host.peerStore.all()
      return peers.filter(p => p.protocols.includes(DHT_PROTOCOL)).length >= min
    }
    try {
      await until(enough, `DHT peers of ${node.agentId} >= ${min}`, ROUTING_NUDGE_MS)
    } catch {
      // a node whose DHT self-query ran while it knew only its bootstrap peer learns the later ones at the
      // next table refresh (minutes): it is told of a few more, as an operator would add bootstrap peers
      const others = nodes.filter(n => n !== node).slice(0, min)
      for (const other of others) await node.join(other.addresses)
      // generous: on a loaded machine (CI runs files in parallel on 2 cores) identify takes a while
      await until(enough, `DHT peers of ${node.agentId} >= ${min}`, 60_000)
    }
  }))
}

/** How long waitForRouting waits on the DHT alone before it tells a node of more peers. */
const ROUTING_NUDGE_MS = 10_000

/** Re-check a condition until it holds (bounded); for state that exposes no event, e.g. the DHT routing table size. */
export async function until (cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 5))
  }
}

/** `n` nodes on TCP loopback that know nothing of each other: the test dials what it needs. */
export async function startLoneNodes (n: number, options: MeshNodeOptions = {}): Promise<MeshNode[]> {
  const nodes: MeshNode[] = []
  for (let i = 0; i < n; i++) {
    const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, ...options })
    await node.start()
    nodes.push(node)
  }
  return nodes
}

export async function stopAll (nodes: MeshNode[]): Promise<void> {
  await Promise.all(nodes.map(async n => n.stop()))
}

/** Resolve with the first event committed on `node` (as executor) that matches. */
export async function nextEvent (node: MeshNode, match: (e: AgentEvent) => boolean, timeoutMs = 20_000): Promise<AgentEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { off(); reject(new Error('timed out waiting for an event')) }, timeoutMs)
    const off = node.runs.onEvent((e) => {
      if (!match(e)) return
      clearTimeout(timer)
      off()
      resolve(e)
    })
  })
}

/** Assert that a promise rejects with an AapError of `code`. */
export async function rejectsWith (p: Promise<unknown>, code: string): Promise<AapError> {
  try {
    await p
  } catch (err) {
    if (err instanceof AapError && err.code === code) return err
    throw new Error(`expected ${code}, got ${(err as Error).name}: ${(err as { code?: string }).code ?? ''} ${(err as Error).message}`)
  }
  throw new Error(`expected ${code}, but it resolved`)
}

/**
 * Named gates a test opens by hand: `gates.get('task-1')` (made on first use)
 * resolves when the test calls `.resolve()` on it; `openAll()` releases every
 * one (for afterAll, so no handler is left waiting).
 */
export function namedGates (): { get: (name: string) => PromiseWithResolvers<void>, openAll: () => void } {
  const gates = new Map<string, PromiseWithResolvers<void>>()
  return {
    get: (name) => {
      let g = gates.get(name)
      if (g === undefined) {
        g = Promise.withResolvers<void>()
        gates.set(name, g)
      }
      return g
    },
    openAll: () => { for (const g of gates.values()) g.resolve() }
  }
}

/**
 * Workers that hold their runs: each node serves `capability` (and publishes
 * a card saying so) with a handler that waits until the test resolves the
 * run's gate in `held` (set once the run starts) or the run ends.
 */
export async function holdingWorkers (nodes: MeshNode[], capability: { capability_id: string, version: string }, held: Map<string, PromiseWithResolvers<void>>): Promise<void> {
  for (const [i, n] of nodes.entries()) {
    n.runs.handle(capability, async (ctx) => {
      const gate = Promise.withResolvers<void>()
      held.set(ctx.run.run_id, gate)
      await Promise.race([gate.promise, new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })])
      return { ok: true }
    })
    await n.publishCard({ name: `holding-worker-${i}`, capabilities: [capability] })
  }
}

/** Delegate a task from `from` to the holding worker `to` (holdingWorkers) and wait until its run has started and is held; its run id. */
export async function heldRun (from: MeshNode, to: MeshNode, capability: { capability_id: string, version: string }, task: string, held: Map<string, PromiseWithResolvers<void>>): Promise<string> {
  const run = await from.delegate({ to_agent: to.agentId, task_id: task, capability, input: {} })
  await until(() => held.has(run.run_id), 'the run to start')
  return run.run_id
}

/** A bare libp2p host of this node's stack, started, on TCP loopback (a new Ed25519 key unless one is given; `dht` tunes its DHT). */
export async function startLoopbackHost (privateKey?: PrivateKey, dht?: DhtTuning): Promise<MeshHost> {
  const h = await createHost({ privateKey: privateKey ?? await generateKeyPair('Ed25519'), datastore: new MemoryDatastore(), listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, ...(dht === undefined ? {} : { dht }) })
  await h.start()
  return h
}

/**
 * A handler that blocks first when its input says `block: true` (at
 * checkpoint `checkpoint`) and, with `hold: true`, holds until its run ends.
 */
export function holdingHandler (checkpoint: string): (ctx: RunContext) => Promise<Record<string, unknown>> {
  return async (ctx) => {
    if (ctx.input.block === true) await ctx.block('waiting', checkpoint)
    if (ctx.input.hold === true) {
      await new Promise((_resolve, reject) => { ctx.signal.addEventListener('abort', () => { reject(ctx.signal.reason) }, { once: true }) })
    }
    return { ok: true }
  }
}

/**
 * A loopback TCP node that serves `capability` with `handler` (a card naming it published), with `options`
 * (a datastore, a key): the executor of the disk-fault tests, which restart it on the same datastore.
 */
export async function servingNode (capability: { capability_id: string, version: string }, options: Partial<MeshNodeOptions> = {}, handler: RunHandler = async () => ({ ok: true })): Promise<MeshNode> {
  const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), ...options })
  await n.start()
  n.runs.handle(capability, handler)
  await n.publishCard({ name: capability.capability_id.replace(/^cap:/, ''), capabilities: [capability] })
  return n
}

/** A port of 127.0.0.1 free a moment ago (a server's, closed again): nothing listens on it, so a dial to it is refused at once. */
export async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
  const port = (server.address() as AddressInfo).port
  await new Promise<void>((resolve, reject) => { server.close((err) => { if (err === undefined) resolve(); else reject(err) }) })
  return port
}
