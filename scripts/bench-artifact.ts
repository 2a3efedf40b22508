/**
 * Artifact throughput between two processes on TCP loopback, beside a raw
 * libp2p stream copy of the same bytes over the same connection:
 *
 *  - holder (child process): a mesh node that stores `--mib` MiB as an
 *    artifact, and also serves a bare protocol that writes those same bytes
 *    (read from its store) on a stream as fast as the stream drains;
 *  - fetcher (this process): for each of `--runs` rounds, a fresh mesh node
 *    (empty store) connects to the holder, then (timed) fetches the artifact
 *    over /aap/artifact/0.1.0 (manifest, chunks verified against it, stored
 *    on disk), and (timed) copies the raw stream into nothing.
 *
 * The ratio of the two, taken in the same run, is what to read.
 *
 *   node scripts/bench-artifact.ts [--mib 64] [--runs 3] [--json]
 */
import { performance } from 'node:perf_hooks'
import { availableParallelism, cpus } from 'node:os'
import { fileURLToPath } from 'node:url'
import type { Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { announceReady, exitOnShutdown, intArg, parseArgs, spawnReady } from './lib/proc.ts'
import { printTable } from './lib/stats.ts'
import { allowWindowGrowth } from '../src/wire/yamux-window.ts'

const RAW_PROTOCOL = '/aap-bench/blob/1.0.0'
const MIB = 1024 * 1024
const args = parseArgs(process.argv.slice(2), {
  known: ['mib', 'runs', 'json', 'holder'],
  text: 'usage: node scripts/bench-artifact.ts [--mib 64] [--runs 3] [--json]'
})
const SIZE_MIB = intArg(args, 'mib', 64)
const RUNS = intArg(args, 'runs', 3)
const JSON_OUT = args.has('json')
const log = (msg: string): void => { process.stderr.write(`[bench-artifact] ${msg}\n`) }

async function * pseudoRandom (size: number, seed: number): AsyncGenerator<Uint8Array> {
  let x = seed | 1
  const piece = 256 * 1024
  for (let done = 0; done < size; done += piece) {
    const words = new Uint32Array(piece / 4)
    for (let i = 0; i < words.length; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; words[i] = x >>> 0 }
    yield new Uint8Array(words.buffer, 0, Math.min(piece, size - done))
  }
}

async function holder (): Promise<void> {
  const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
  await node.start()
  const part = await node.artifacts.put(pseudoRandom(SIZE_MIB * MIB, 42), { media_type: 'application/octet-stream' })
  await node.host.handle(RAW_PROTOCOL, (stream: Stream) => {
    void (async () => {
      try {
        const { chunks } = await node.artifacts.open(part.artifact)
        for await (const c of chunks) {
          if (!stream.send(c)) await stream.onDrain({ signal: AbortSignal.timeout(30_000) })
        }
        await stream.close({ signal: AbortSignal.timeout(30_000) })
      } catch (err) {
        stream.abort(err instanceof Error ? err : new Error(String(err)))
      }
    })()
  })
  exitOnShutdown(async () => { await node.stop() })
  announceReady({ addr: node.addresses[0], agentId: node.agentId, artifact: part.artifact, size: part.size })
}

async function rawCopy (node: MeshNode, agentId: string): Promise<number> {
  const stream = await node.host.dialProtocol(peerIdFromString(agentId), RAW_PROTOCOL, { signal: AbortSignal.timeout(10_000) })
  // the same window rule as the artifact fetch's stream (bulk.ts), so both ride the same transport settings
  allowWindowGrowth(stream)
  let n = 0
  for await (const c of stream) n += c.byteLength
  return n
}

async function fetcher (): Promise<void> {
  const child = await spawnReady(fileURLToPath(import.meta.url), ['--holder', '--mib', String(SIZE_MIB)], { timeoutMs: 120_000 })
  const info = child.info as unknown as { addr: string, agentId: string, artifact: string, size: number }
  const artifactMiBs: number[] = []
  const rawMiBs: number[] = []
  try {
    for (let r = 0; r < RUNS; r++) {
      const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
      await node.start()
      try {
        if (await node.join([info.addr]) === 0) throw new Error('cannot reach the holder')
        let t = performance.now()
        const m = await node.artifacts.fetch(info.artifact, { holders: [info.agentId] })
        const artifactMs = performance.now() - t
        if (m.size !== info.size) throw new Error('fetched the wrong size')
        t = performance.now()
        const copied = await rawCopy(node, info.agentId)
        const rawMs = performance.now() - t
        if (copied !== info.size) throw new Error(`raw copy moved ${copied} of ${info.size} bytes`)
        artifactMiBs.push(SIZE_MIB / (artifactMs / 1000))
        rawMiBs.push(SIZE_MIB / (rawMs / 1000))
        log(`run ${r + 1}/${RUNS}: artifact ${artifactMiBs.at(-1)?.toFixed(0)} MiB/s, raw ${rawMiBs.at(-1)?.toFixed(0)} MiB/s`)
      } finally {
        await node.stop()
      }
    }
  } finally {
    await child.stop()
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN
  const result = {
    mib: SIZE_MIB,
    runs: RUNS,
    artifact: { mibPerSec: median(artifactMiBs), samples: artifactMiBs },
    raw: { mibPerSec: median(rawMiBs), samples: rawMiBs },
    ratio: median(artifactMiBs) / median(rawMiBs)
  }
  if (JSON_OUT) {
    process.stdout.write(JSON.stringify(result) + '\n')
    return
  }
  process.stdout.write(`\nartifact transfer, ${SIZE_MIB} MiB, median of ${RUNS} — ${process.version}, ${availableParallelism()} CPUs (${cpus()[0]?.model ?? 'unknown'})\n\n`)
  printTable([
    { what: '/aap/artifact fetch (verified, stored on disk)', 'MiB/s': result.artifact.mibPerSec.toFixed(1) },
    { what: 'raw libp2p stream copy of the same bytes', 'MiB/s': result.raw.mibPerSec.toFixed(1) },
    { what: 'ratio artifact / raw', 'MiB/s': `${result.ratio.toFixed(2)}x` }
  ])
}

if (args.has('holder')) await holder()
else await fetcher()
