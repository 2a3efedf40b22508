/**
 * What one gossip message costs, against one frame on a plain libp2p stream
 * between the same two nodes and an Ed25519 verify:
 *
 *   node scripts/bench-gossip.ts [--messages 3000] [--bytes 450] [--json]
 *
 * Two mesh nodes over TCP loopback, both in this process, so the CPU figure
 * is the sender's and the receiver's together. Each message is sent alone and
 * awaited at the receiver before the next (as events go: one at a time), so
 * every one is its own frame and system call.
 *
 *  - gossip: A publishes on a topic B follows (B's validator accepts at once),
 *    as every copy of an event costs its sender and its receiver;
 *  - stream frame: A writes a length-prefixed frame of the same size on one
 *    open stream to B, which decodes it; the transport's own share;
 *  - Ed25519 verify: node:crypto, one event-sized message; what each
 *    subscriber pays once per event, however many copies reach it.
 *
 * Why it is here: at 100 subscribers on 2 cores an event's delivery p50 is
 * about the CPU of the whole wave (every copy at every node) over the two
 * cores, and each node receives several copies (its mesh peers forward it
 * too). This prints what each copy costs on this stack.
 */
import { performance } from 'node:perf_hooks'
import { generateKeyPairSync, sign, verify } from 'node:crypto'
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { FrameDecoder, lengthPrefix } from '../src/wire/framing.ts'
import { startSimMesh } from '../src/sim/mesh.ts'
import { intArg, parseArgs, usageError } from './lib/proc.ts'
import { printTable } from './lib/stats.ts'

const args = parseArgs(process.argv.slice(2), {
  known: ['messages', 'bytes', 'json'],
  text: 'usage: node scripts/bench-gossip.ts [--messages 3000] [--bytes 450] [--json]'
})
const MESSAGES = intArg(args, 'messages', 3000)
const BYTES = intArg(args, 'bytes', 450)
const JSON_OUT = args.has('json')
if (MESSAGES < 1) usageError('--messages must be at least 1')
if (BYTES < 16 || BYTES > 64 * 1024) usageError('--bytes must be between 16 and 65536')
/** Messages sent before the measured ones (JIT, stream set-up). */
const WARMUP = 300
const TOPIC = 'aap-bench-gossip'
const PROTOCOL = '/aap-bench/frames/1.0.0'
/** Bound on one message reaching the receiver. */
const MESSAGE_TIMEOUT_MS = 10_000

const log = (msg: string): void => { process.stderr.write(`[bench-gossip] ${msg}\n`) }
const payload = (i: number): Uint8Array => {
  const b = new Uint8Array(BYTES).fill(0x61)
  new DataView(b.buffer).setUint32(0, i)
  return b
}

/** One waiter for the receiver's count to reach a number (each message awaited before the next). */
class Arrivals {
  count = 0
  private want = 0
  private wake: (() => void) | undefined
  arrived (): void {
    this.count++
    if (this.count >= this.want && this.wake !== undefined) {
      const w = this.wake
      this.wake = undefined
      w()
    }
  }

  async next (): Promise<void> {
    this.want = this.count + 1
    if (this.count >= this.want) return
    const { promise, resolve, reject } = Promise.withResolvers<void>()
    const timer = setTimeout(() => { reject(new Error(`message ${this.want} did not arrive within ${MESSAGE_TIMEOUT_MS} ms`)) }, MESSAGE_TIMEOUT_MS)
    this.wake = () => { clearTimeout(timer); resolve() }
    await promise
  }
}

interface Figure { cpu_us: number, wall_us: number }

async function measure (send: (i: number) => Promise<void> | void, arrivals: Arrivals): Promise<Figure> {
  for (let i = 0; i < WARMUP; i++) {
    const next = arrivals.next()
    await send(i)
    await next
  }
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  for (let i = 0; i < MESSAGES; i++) {
    const next = arrivals.next()
    await send(WARMUP + i)
    await next
  }
  const cpu = process.cpuUsage(c0)
  return { cpu_us: (cpu.user + cpu.system) / MESSAGES, wall_us: (performance.now() - t0) * 1000 / MESSAGES }
}

function measureVerify (): Figure {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const msg = payload(0)
  const sig = sign(null, msg, privateKey)
  const n = Math.max(MESSAGES, 1000)
  for (let i = 0; i < 200; i++) verify(null, msg, publicKey, sig)
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  for (let i = 0; i < n; i++) if (!verify(null, msg, publicKey, sig)) throw new Error('the signature did not verify')
  const cpu = process.cpuUsage(c0)
  return { cpu_us: (cpu.user + cpu.system) / n, wall_us: (performance.now() - t0) * 1000 / n }
}

async function main (): Promise<void> {
  const sim = await startSimMesh({ nodes: 2, transport: 'tcp' })
  const [a, b] = sim.map(n => n.node.host)
  if (a === undefined || b === undefined) throw new Error('the mesh did not start two nodes')
  try {
    // gossip: B follows the topic and accepts at once; A publishes
    const gossiped = new Arrivals()
    b.services.pubsub.topicValidators.set(TOPIC, () => 'accept' as never)
    b.services.pubsub.addEventListener('message', (evt) => { if (evt.detail.topic === TOPIC) gossiped.arrived() })
    b.services.pubsub.subscribe(TOPIC)
    const deadline = Date.now() + MESSAGE_TIMEOUT_MS
    while (!a.services.pubsub.getSubscribers(TOPIC).some(p => p.equals(b.peerId))) {
      if (Date.now() > deadline) throw new Error('A never saw B on the topic')
      await new Promise(resolve => setTimeout(resolve, 10))
    }
    log(`gossip: ${MESSAGES} messages of ${BYTES} bytes, one at a time`)
    const gossip = await measure(async (i) => { await a.services.pubsub.publish(TOPIC, payload(i)) }, gossiped)

    // stream frame: one open stream, one length-prefixed frame per message
    const framed = new Arrivals()
    await b.handle(PROTOCOL, (stream: Stream) => {
      const decoder = new FrameDecoder(BYTES + 16)
      stream.addEventListener('message', (evt: StreamMessageEvent) => {
        const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
        for (const _frame of decoder.push(data)) framed.arrived()
      })
    })
    const stream = await a.dialProtocol(b.peerId, PROTOCOL, { signal: AbortSignal.timeout(MESSAGE_TIMEOUT_MS) })
    log(`stream frames: ${MESSAGES} frames of ${BYTES} bytes, one at a time`)
    const frame = await measure((i) => { stream.send(lengthPrefix(BYTES)); stream.send(payload(i)) }, framed)
    stream.abort(new Error('bench over'))

    const ed25519 = measureVerify()
    const figures = { messages: MESSAGES, bytes: BYTES, gossip, stream_frame: frame, ed25519_verify: ed25519, gossip_over_frame: gossip.cpu_us / frame.cpu_us }
    if (JSON_OUT) {
      process.stdout.write(JSON.stringify(figures) + '\n')
      return
    }
    process.stdout.write(`\none message, ${BYTES} bytes, two nodes over TCP loopback in one process (sender and receiver together), node ${process.version}\n\n`)
    printTable([
      { what: 'gossip message (publish -> validator -> delivered)', 'CPU per message': `${gossip.cpu_us.toFixed(1)} µs`, 'wall per message': `${gossip.wall_us.toFixed(1)} µs` },
      { what: 'frame on an open libp2p stream', 'CPU per message': `${frame.cpu_us.toFixed(1)} µs`, 'wall per message': `${frame.wall_us.toFixed(1)} µs` },
      { what: 'Ed25519 verify (node:crypto)', 'CPU per message': `${ed25519.cpu_us.toFixed(1)} µs`, 'wall per message': `${ed25519.wall_us.toFixed(1)} µs` }
    ])
    process.stdout.write(`\ngossip message / stream frame (CPU): ${figures.gossip_over_frame.toFixed(2)}x\n`)
  } finally {
    await Promise.all(sim.map(async n => n.node.stop()))
  }
}

await main()
process.exit(0)
