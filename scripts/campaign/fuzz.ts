/**
 * Campaign part "fuzz": mutated frames on every aap stream protocol against a
 * node in its own process (child.ts target, LevelDB datastore, TCP on
 * 127.0.0.1), while an honest node in a third process keeps delegating to it.
 *
 * Frames go out in streams of FRAMES_PER_STREAM: most streams carry only
 * well-framed frames (mutated requests and envelopes, any JSON, any bytes as a
 * frame body), each of which must get exactly one answer; the rest carry the
 * same frames with their bytes damaged (framing may break: then a
 * stream-level error and a closed stream). Figures: crashes of the target,
 * hung streams (no end within HANG_BOUND_MS after our end), unanswered
 * well-framed frames, answers that are not response envelopes, the target's
 * heap after a full GC before and after, the honest peer's delegation latency
 * before and during the fuzzing, and the fuzzing peer's own next call after.
 */
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { PeerId, Stream, StreamMessageEvent } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import {
  CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL, DIAL_TIMEOUT_MS,
  EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL, HANDLER_TIMEOUT_MS, HANDOFF_MAX_FRAME_BYTES, HANDOFF_PROTOCOL
} from '../../src/constants.ts'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import { newRunId } from '../../src/runlog/event.ts'
import { schema } from '../../src/schema/validate.ts'
import { FrameDecoder } from '../../src/wire/framing.ts'
import { rawCall } from '../../src/wire/raw.ts'
import { wireSeeds } from '../../test/fixtures/fuzz.ts'
import { besideBurner, latencyFigures, mb, prng, startChild, type Child } from './common.ts'
import { concat, damage, framedFrame } from './gen.ts'
import type { PartResult } from './report.ts'

const PROTOCOLS = [CARD_PROTOCOL, DELEGATE_PROTOCOL, CONTROL_PROTOCOL, HANDOFF_PROTOCOL, EVENTS_SYNC_PROTOCOL]
/** The frame limit each protocol serves with: a larger frame ends its stream (one stream-level error), by design. */
const MAX_FRAME_BYTES: Record<string, number> = {
  [CARD_PROTOCOL]: CARD_MAX_FRAME_BYTES,
  [DELEGATE_PROTOCOL]: DELEGATE_MAX_FRAME_BYTES,
  [CONTROL_PROTOCOL]: CONTROL_MAX_FRAME_BYTES,
  [HANDOFF_PROTOCOL]: HANDOFF_MAX_FRAME_BYTES,
  [EVENTS_SYNC_PROTOCOL]: EVENTS_SYNC_MAX_FRAME_BYTES
}

/** Bytes of a frame's body (the frame less its varint length prefix). */
function bodyBytes (frame: Uint8Array): number {
  let i = 0
  while (i < frame.length && ((frame[i] ?? 0) & 0x80) !== 0) i++
  return frame.length - i - 1
}
const FRAMES_PER_STREAM = 50
/** Streams in flight per protocol (the target serves MAX_INBOUND_STREAMS_PER_PROTOCOL per connection). */
const CONCURRENT_STREAMS = 4
/** Share of streams whose bytes are damaged (the rest are well framed). */
const DAMAGED_SHARE = 0.2
/** A stream not ended by the target this long after ours is a hang. */
const HANG_BOUND_MS = HANDLER_TIMEOUT_MS + 12_000
const isResponse = schema<unknown>('aap:common#/definitions/ResponseEnvelope')

export interface FuzzOptions { framesPerProtocol: number, windowMs: number, seed: number }

interface StreamOutcome { answers: number, invalid: number, hang: boolean, refused: boolean, cut: boolean }

/** Write `bytes` on a new stream, end our side, and count what comes back until the target ends its side. */
async function oneStream (fuzzer: MeshNode, peer: PeerId, protocol: string, bytes: Uint8Array): Promise<StreamOutcome> {
  const out: StreamOutcome = { answers: 0, invalid: 0, hang: false, refused: false, cut: false }
  let stream: Stream
  try {
    stream = await fuzzer.host.dialProtocol(peer, protocol, { signal: AbortSignal.timeout(DIAL_TIMEOUT_MS) })
  } catch {
    out.refused = true // the target may refuse a stream (its per-connection limit): counted, not an error
    return out
  }
  const decoder = new FrameDecoder(4 * 1024 * 1024)
  const ended = Promise.withResolvers<void>()
  stream.addEventListener('message', (evt: StreamMessageEvent) => {
    try {
      for (const f of decoder.push(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray())) {
        if (isResponse(JSON.parse(new TextDecoder().decode(f)))) out.answers++
        else out.invalid++
      }
    } catch {
      out.invalid++ // an answer that is not a frame of JSON is what this figure counts
    }
  })
  stream.addEventListener('end', () => { ended.resolve() })
  stream.addEventListener('close', () => { ended.resolve() })
  let timer: ReturnType<typeof setTimeout> | undefined
  try {
    try {
      stream.send(bytes)
      await stream.close({ signal: AbortSignal.timeout(HANG_BOUND_MS) })
    } catch {
      out.cut = true // the target closed or reset the stream while we wrote (framing lost): the wait below sees it end
    }
    const hang = new Promise<boolean>(resolve => { timer = setTimeout(() => { resolve(true) }, HANG_BOUND_MS) })
    out.hang = await Promise.race([ended.promise.then(() => false), hang])
  } finally {
    clearTimeout(timer)
    if (stream.status !== 'closed') stream.abort(new Error('fuzzer done with the stream'))
  }
  return out
}

interface ProtocolFigures { frames: number, streams: number, damagedStreams: number, answers: number, unanswered: number, invalid: number, hangs: number, refused: number, cut: number, oversizedStreams: number, seconds: number, nextCallMs: number, nextPingMs: number, pingError?: string }

async function fuzzProtocol (fuzzer: MeshNode, peer: PeerId, protocol: string, seeds: ReturnType<typeof wireSeeds>, o: FuzzOptions, seedOffset: number): Promise<ProtocolFigures> {
  const r = prng(o.seed + seedOffset)
  const list = seeds[protocol] ?? []
  const streams = Math.ceil(o.framesPerProtocol / FRAMES_PER_STREAM)
  const f: ProtocolFigures = { frames: 0, streams, damagedStreams: 0, answers: 0, unanswered: 0, invalid: 0, hangs: 0, refused: 0, cut: 0, oversizedStreams: 0, seconds: 0, nextCallMs: 0, nextPingMs: 0 }
  const started = performance.now()
  let nextStream = 0
  const worker = async (): Promise<void> => {
    while (nextStream < streams) {
      nextStream++
      const frames = Array.from({ length: FRAMES_PER_STREAM }, () => framedFrame(r, list))
      const damaged = r() < DAMAGED_SHARE
      // the frames before the first one over the protocol's limit are answered, then one stream-level error
      const over = frames.findIndex(fr => bodyBytes(fr) > (MAX_FRAME_BYTES[protocol] ?? Infinity))
      const expected = over < 0 ? frames.length : over + 1
      if (over >= 0 && !damaged) f.oversizedStreams++
      const bytes = damaged ? damage(r, concat(frames)) : concat(frames)
      f.frames += frames.length
      if (damaged) f.damagedStreams++
      const s = await oneStream(fuzzer, peer, protocol, bytes)
      f.answers += s.answers
      f.invalid += s.invalid
      if (s.hang) f.hangs++
      if (s.refused) f.refused++
      if (s.cut) f.cut++
      if (!damaged && !s.refused && s.answers < expected) f.unanswered += expected - s.answers
    }
  }
  await Promise.all(Array.from({ length: CONCURRENT_STREAMS }, worker))
  f.seconds = (performance.now() - started) / 1000
  // the fuzzing peer itself is not punished beyond its streams: its next honest call
  const t0 = performance.now()
  const answer = await rawCall(fuzzer.host, peer, CARD_PROTOCOL, 'get_card', {}, { timeoutMs: 30_000 })
  f.nextCallMs = answer.ok ? Math.round(performance.now() - t0) : -1
  const t1 = performance.now()
  try {
    await fuzzer.host.services.ping.ping(peer, { signal: AbortSignal.timeout(30_000) })
    f.nextPingMs = Math.round(performance.now() - t1)
  } catch (err) {
    // libp2p's ping allows one outbound stream per connection; one that has not closed yet refuses the next
    f.nextPingMs = -1
    f.pingError = (err as Error).message
  }
  return f
}

interface Window { latencies: number[], failures: number, errors: Record<string, number> }

export async function runFuzz (o: FuzzOptions): Promise<PartResult> {
  const result: PartResult = { name: 'fuzz', title: 'mutated frames on every stream protocol against a node process', built: true, ran: true }
  const dataDir = await mkdtemp(join(tmpdir(), 'aap-campaign-target-'))
  let target: Child | undefined
  let honest: Child | undefined
  let fuzzer: MeshNode | undefined
  try {
    target = await startChild(['target', dataDir])
    const targetId = String(target.info.agentId)
    const targetAddrs = target.info.addresses as string[]
    honest = await startChild(['honest', JSON.stringify(targetAddrs), targetId])
    fuzzer = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    await fuzzer.start()
    if (await fuzzer.join(targetAddrs) === 0) throw new Error('the fuzzer could not reach the target')
    const peer = peerIdFromString(targetId)
    const seeds = wireSeeds(targetId, newRunId(targetId))

    // before: the honest peer warms up, then one window of its calls
    await sleep(Math.min(o.windowMs, 3_000))
    await honest.request<Window>('window')
    const heapBefore = await target.request<{ heapUsed: number, rss: number }>('heap')
    await sleep(o.windowMs)
    const before = await honest.request<Window>('window')
    const burn = await besideBurner(honest, o.windowMs)

    const started = performance.now()
    const per: Array<[string, ProtocolFigures]> = []
    for (const [i, protocol] of PROTOCOLS.entries()) {
      per.push([protocol, await fuzzProtocol(fuzzer, peer, protocol, seeds, o, i * 7919)])
      if (target.exited !== undefined) break
    }
    const during = await honest.request<Window>('window')
    const fuzzSeconds = (performance.now() - started) / 1000
    const crashed = target.exited === undefined ? 0 : 1
    const heapAfter = crashed === 1 ? undefined : await target.request<{ heapUsed: number, rss: number }>('heap')

    const sum = (k: Exclude<keyof ProtocolFigures, 'pingError'>): number => per.reduce((n, [, f]) => n + f[k], 0)
    const b = latencyFigures(before.latencies, before.failures)
    const d = latencyFigures(during.latencies, during.failures)
    const c = latencyFigures(burn.latencies, burn.failures)
    result.musts = [
      { figure: 'target crashes', value: crashed, max: 0 },
      { figure: 'hung streams', value: sum('hangs'), max: 0 },
      { figure: 'unanswered well-framed frames', value: sum('unanswered'), max: 0 },
      { figure: 'answers that are not response envelopes', value: sum('invalid'), max: 0 },
      { figure: 'honest calls failed during fuzzing', value: during.failures, max: 0 }
    ]
    result.figures = [
      ['frames sent (all protocols)', sum('frames')],
      ['seconds of fuzzing (the part also starts three nodes and measures a window before)', Math.round(fuzzSeconds)],
      ['frames per second', Math.round(sum('frames') / fuzzSeconds)],
      ...per.map(([p, f]): [string, string] => [`${p}`, `${f.frames} frames in ${f.streams} streams (${f.damagedStreams} damaged, ${f.oversizedStreams} with a frame over the protocol's limit), ${f.answers} answers, ${f.unanswered} unanswered, ${f.hangs} hangs, ${f.refused} streams refused, ${f.cut} cut by the target while written, ${f.seconds.toFixed(1)} s; the fuzzer's next get_card ${f.nextCallMs} ms and ping ${pingText(f)}`]),
      ['target heap after GC, before → after', heapAfter === undefined ? 'target crashed' : `${mb(heapBefore.heapUsed)} MB → ${mb(heapAfter.heapUsed)} MB (growth ${mb(heapAfter.heapUsed - heapBefore.heapUsed)} MB; rss ${mb(heapBefore.rss)} → ${mb(heapAfter.rss)} MB)`],
      ['honest delegation latency before (ms)', `n ${b.n}, p50 ${b.p50}, p99 ${b.p99}, max ${b.max}, failed ${b.failures}`],
      ['honest delegation latency during (ms)', `n ${d.n}, p50 ${d.p50}, p99 ${d.p99}, max ${d.max}, failed ${d.failures}${Object.keys(during.errors).length > 0 ? ` (${JSON.stringify(during.errors)})` : ''}`],
      ['honest p50 during / before', (d.p50 / b.p50).toFixed(2)],
      ['honest p99 during / before', (d.p99 / b.p99).toFixed(2)],
      ['honest delegation latency beside a process that burns one core and sends nothing (ms)', `n ${c.n}, p50 ${c.p50}, p99 ${c.p99}, max ${c.max}, failed ${c.failures}`],
      ['honest p50 and p99 during fuzzing / beside the burner (what the target\'s handling of the fuzzer adds)', `${(d.p50 / c.p50).toFixed(2)} and ${(d.p99 / c.p99).toFixed(2)}`]
    ]
    result.notes = [
      `Seed ${o.seed}; ${FRAMES_PER_STREAM} frames per stream, ${CONCURRENT_STREAMS} streams in flight, ${Math.round(DAMAGED_SHARE * 100)}% of streams byte-damaged; a stream is hung when the target has not ended it ${HANG_BOUND_MS} ms after ours. The honest node delegates to the target from its own process every 50 ms; the figures compare its calls in a window before the fuzzing with those during it (one machine, 2 cores shared: latency includes the fuzzer's own CPU use).`,
      'Unanswered frames count only well-framed streams (a damaged stream stops being read where its framing breaks, by design); in a well-framed stream with a frame over the protocol\'s frame limit, the frames before it and one stream-level error are expected, nothing after it. "Streams refused" are streams the target did not open (its per-connection stream limit); they are reported, not required to be 0.'
    ]
  } catch (err) {
    result.error = (err as Error).message
  } finally {
    await fuzzer?.stop()
    await honest?.stop()
    await target?.stop()
  }
  return result
}

function pingText (f: ProtocolFigures): string {
  return f.pingError === undefined ? `${f.nextPingMs} ms` : `failed (${f.pingError})`
}

async function sleep (ms: number): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms))
}
