/**
 * Artifacts: typed outputs too large for a signed event, stored by content
 * hash and fetched from any peer that holds them (protocols/artifact.md).
 *
 * `put` stores a byte stream and returns the FilePart that names it; the run
 * log carries only that reference. `fetch` makes an artifact whole in the
 * local store: it asks the holders it is told of, then the providers the DHT
 * names, then the peers it is connected to, and checks the manifest against
 * the id and every chunk against the manifest as it arrives. Each holder
 * has a rate to keep (fetch-bounds.ts); the chunks a failed fetch verified
 * are kept for the next fetch of the artifact (kept.ts). A node that
 * holds an artifact (made or fetched) serves it and announces it in the DHT.
 */
import type { Libp2p, PeerId } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'
import {
  ARTIFACT_CHUNK_BYTES, ARTIFACT_CHUNK_TIMEOUT_MS, ARTIFACT_FETCH_WINDOW_CHUNKS, ARTIFACT_FIND_PROVIDERS_TIMEOUT_MS, ARTIFACT_MANIFEST_MAX_BYTES,
  ARTIFACT_MAX_HOLDERS_TRIED, ARTIFACT_MAX_INBOUND_STREAMS, ARTIFACT_MAX_PIPELINED_REQUESTS, ARTIFACT_MAX_REQUEST_FRAME_BYTES, ARTIFACT_PROTOCOL,
  ARTIFACT_NAME_MAX_CHARS, ARTIFACT_PROVIDE_TIMEOUT_MS, ARTIFACT_SERVED_MANIFESTS_CACHED, ARTIFACT_STORE_MAX_BYTES, HANDLER_TIMEOUT_MS
} from '../constants.ts'
import { AapError, ArtifactNotFoundError, InvalidRequestError, toAapError } from '../errors.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import { componentLogger, type Logger } from '../logger.ts'
import { schema } from '../schema/validate.ts'
import { BulkSession, findProviders, serveBulk, type BulkAnswer } from '../wire/bulk.ts'
import { JSON_CODEC, checkHeldLengths, firstIndexes, parseId, verifyChunk, verifyManifest, type Manifest } from './manifest.ts'
import { ArtifactStore, type StoredArtifact } from './store.ts'
import { KeptFetches, type VerifiedManifest } from './kept.ts'
import { droppedSlow, failedOwnCheck, ownCheck, rateBound, storeError, storeRefused } from './fetch-bounds.ts'
import { ARTIFACT_LIST_DEFAULT_LIMIT, ARTIFACT_LIST_MAX_LIMIT } from './constants.ts'
import type { StagedWrite } from './write.ts'
import { untilAborted } from '../util/deadline.ts'
import type { ArtifactSource, ArtifactWriter, FilePart, PutOptions } from './types.ts'

const isManifestRequest = schema<{ artifact: string }>('aap:artifact#/definitions/ManifestRequest')
const isChunkRequest = schema<{ artifact: string, index: number }>('aap:artifact#/definitions/ChunkRequest')
const isMediaType = schema<string>('aap:artifact#/definitions/MediaType')

export type ArtifactHost = Pick<Libp2p, 'handle' | 'unhandle' | 'dialProtocol' | 'contentRouting' | 'peerId' | 'getPeers'>

export interface ArtifactsInit {
  host: ArtifactHost
  /** Where the store keeps its files. */
  dir: string
  /** Bound of the store (default ARTIFACT_STORE_MAX_BYTES). */
  maxBytes?: number
  logger?: Logger
}

export interface FetchOptions {
  /** Agents that should hold the artifact (the run's executor), asked first. */
  holders?: string[]
  signal?: AbortSignal
}

interface SharedFetch {
  promise: Promise<Manifest>
  ctl: AbortController
  callers: number
  settled: boolean
  /** Holders its callers named, the first's then those of each who joined (asked as they come, see `holders`). */
  hints: string[]
}

/** A page of GET /v1/artifacts. */
export interface ArtifactPage {
  artifacts: StoredArtifact[]
  next_cursor: string | null
  used_bytes: number
  max_bytes: number
  count: number
  max_count: number
}

/** What the service has done, for metrics and tests. */
export interface ArtifactStats {
  stored: number
  fetched: number
  chunksServed: number
  chunksFetched: number
  /** Chunks or manifests from a peer that failed verification. */
  rejected: number
  /** Holders dropped for sending slower than ARTIFACT_FETCH_MIN_BYTES_PER_SEC (fetch-bounds.ts). */
  slowHolders: number
}

/** A fetch's staged write, and the manifest once one holder sent it (or a failed fetch before it had, kept.ts). */
interface FetchState { w: StagedWrite, manifest?: VerifiedManifest }

async function * once (bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  yield bytes
}

export class Artifacts implements ArtifactWriter {
  readonly store: ArtifactStore
  readonly stats: ArtifactStats = { stored: 0, fetched: 0, chunksServed: 0, chunksFetched: 0, rejected: 0, slowHolders: 0 }
  private readonly host: ArtifactHost
  private readonly log: Logger
  /** Fetches in progress, one per artifact, shared by every caller that asks meanwhile (see `fetch`). */
  private readonly fetching = new Map<string, SharedFetch>()
  private unserve: (() => Promise<void>) | undefined
  /** Manifests of artifacts being served, parsed once (a fetch asks for every chunk of one). */
  private readonly served = new Map<string, Manifest>()
  /** The verified chunks of failed fetches, for the next fetch of the same artifact. */
  readonly kept: KeptFetches

  constructor (init: ArtifactsInit) {
    this.host = init.host
    this.log = componentLogger(init.logger, 'artifacts')
    this.store = new ArtifactStore(init.dir, init.maxBytes ?? ARTIFACT_STORE_MAX_BYTES, this.log)
    this.store.onRemoved = (id) => { this.forget(id) }
    this.kept = new KeptFetches(this.store, this.log)
    this.store.spare = async () => await this.kept.dropAll()
  }

  /** An artifact left the store: not served from the cache, and no longer announced in the DHT. */
  private forget (id: string): void {
    this.served.delete(id)
    this.host.contentRouting.cancelReprovide(parseId(id, JSON_CODEC), { signal: AbortSignal.timeout(ARTIFACT_PROVIDE_TIMEOUT_MS) }).catch((err: unknown) => {
      // its provider record expires in the DHT on its own; until then a fetcher asks here and is answered ARTIFACT_NOT_FOUND
      this.log.debug({ err, artifact: id }, 'could not stop announcing a removed artifact')
    })
  }

  /**
   * A page of the artifacts whole on this node, in id order, and the store's
   * fill. `cursor` is the `next_cursor` of the page before (the last id it
   * listed); INVALID_REQUEST for a limit out of range or a cursor that is no
   * artifact id.
   */
  list (opts: { limit?: number, cursor?: string } = {}): ArtifactPage {
    const limit = opts.limit ?? ARTIFACT_LIST_DEFAULT_LIMIT
    if (!Number.isInteger(limit) || limit < 1 || limit > ARTIFACT_LIST_MAX_LIMIT) {
      throw new InvalidRequestError(`limit must be an integer from 1 to ${ARTIFACT_LIST_MAX_LIMIT}`, { reason: 'bad_limit', limit: ARTIFACT_LIST_MAX_LIMIT })
    }
    const after = opts.cursor === undefined ? undefined : parseId(opts.cursor, JSON_CODEC, 'cursor').toString()
    // one more than the page, to know whether another follows
    const found = this.store.list(after, limit + 1)
    const artifacts = found.slice(0, limit)
    const s = this.store
    return {
      artifacts,
      next_cursor: found.length > limit ? artifacts.at(-1)?.artifact ?? null : null,
      used_bytes: s.used,
      max_bytes: s.capacity,
      count: s.count,
      max_count: s.maxCount
    }
  }

  /**
   * Take an artifact out of this node's store, whether the node made it or
   * fetched it (a run's output that another node still holds stays fetchable
   * from there); returns the bytes freed. ARTIFACT_NOT_FOUND when it is not here.
   */
  async remove (id: string): Promise<{ artifact: string, freed_bytes: number }> {
    // the answer names it as every listing does, whatever base the caller spelled it in
    const artifact = parseId(id, JSON_CODEC).toString()
    return { artifact, freed_bytes: await this.store.remove(artifact) }
  }

  async start (): Promise<void> {
    await this.store.open()
    this.kept.open()
    this.unserve = await serveBulk(this.host, {
      protocol: ARTIFACT_PROTOCOL,
      maxRequestBytes: ARTIFACT_MAX_REQUEST_FRAME_BYTES,
      maxPipelined: ARTIFACT_MAX_PIPELINED_REQUESTS,
      maxInboundStreams: ARTIFACT_MAX_INBOUND_STREAMS,
      handlerTimeoutMs: HANDLER_TIMEOUT_MS,
      log: this.log,
      methods: {
        manifest: async (body) => {
          const req = isManifestRequest.assert(body, 'manifest request')
          const bytes = await this.store.manifestBytes(req.artifact)
          if (bytes === undefined) throw new ArtifactNotFoundError(`no artifact ${req.artifact} here`, { artifact: req.artifact })
          // a peer fetches it from here: the last to be evicted now
          this.store.touch(req.artifact)
          return { body: { artifact: req.artifact }, data: bytes }
        },
        chunk: async (body) => {
          const req = isChunkRequest.assert(body, 'chunk request')
          const m = await this.servedManifest(req.artifact)
          if (m === undefined) throw new ArtifactNotFoundError(`no artifact ${req.artifact} here`, { artifact: req.artifact })
          const cid = m.chunks[req.index]
          if (cid === undefined) throw new InvalidRequestError(`artifact ${req.artifact} has ${m.chunks.length} chunks`, { reason: 'bad_index', chunks: m.chunks.length })
          const bytes = await this.store.chunk(cid)
          if (bytes === undefined) throw new ArtifactNotFoundError(`chunk ${req.index} of ${req.artifact} is gone from this node`, { artifact: req.artifact, index: req.index })
          this.stats.chunksServed++
          // served to a peer: a use, as a manifest request is (a fetcher resuming a kept fetch asks for chunks only)
          this.store.touch(req.artifact)
          return { body: { artifact: req.artifact, index: req.index }, data: bytes }
        }
      }
    })
  }

  private async servedManifest (asked: string): Promise<Manifest | undefined> {
    // cached under the canonical id, which a removal forgets: under a peer's spelling (another base) it would be served after
    const id = parseId(asked, JSON_CODEC).toString()
    const cached = this.served.get(id)
    if (cached !== undefined) return cached
    const m = await this.store.manifest(id)
    if (m === undefined) return undefined
    // removed while it was read: not cached, or its chunks would still be served
    if (this.store.holds(id) === undefined) return undefined
    this.served.set(id, m)
    if (this.served.size > ARTIFACT_SERVED_MANIFESTS_CACHED) {
      const oldest = this.served.keys().next().value
      if (oldest !== undefined) this.served.delete(oldest)
    }
    return m
  }

  async stop (): Promise<void> {
    await this.unserve?.()
    this.unserve = undefined
    await this.kept.close()
    // writes still in progress fail; the folder may be opened again (a restart in this process)
    await this.store.close()
  }

  /**
   * Store bytes (a stream is read as it arrives, one chunk in memory at a
   * time) and return the part that names them. The node announces it holds
   * them in the background. Pinned for good unless `pin` is `'run-output'`:
   * then only while run outputs stay within their share of the store (pins.ts).
   */
  async put (source: ArtifactSource, opts: PutOptions): Promise<FilePart> {
    if (!isMediaType(opts.media_type)) throw new InvalidRequestError(`"${String(opts.media_type).slice(0, 80)}" is not a media type`, { reason: 'bad_media_type' })
    // counted in code points, as the FilePart schema's maxLength is (a UTF-16 count refused names the schema allows)
    if (opts.name !== undefined && (opts.name.length === 0 || [...opts.name].length > ARTIFACT_NAME_MAX_CHARS)) {
      throw new InvalidRequestError(`an artifact name has 1 to ${ARTIFACT_NAME_MAX_CHARS} characters (code points)`, { reason: 'bad_name', max_chars: ARTIFACT_NAME_MAX_CHARS })
    }
    const { id, size } = await this.store.put(source instanceof Uint8Array ? once(source) : source, opts.pin === 'run-output' ? 'run-output' : true)
    this.stats.stored++
    this.announce(id)
    return { kind: 'file', artifact: id, size, media_type: opts.media_type, ...(opts.name === undefined ? {} : { name: opts.name }) }
  }

  /** The artifact's manifest if it is whole here. */
  async local (id: string): Promise<Manifest | undefined> {
    return this.store.manifest(id)
  }

  /** Make the artifact whole here (fetching it if needed); returns its manifest. */
  async fetch (asked: string, opts: FetchOptions = {}): Promise<Manifest> {
    // one fetch per artifact however its callers spell the id (the fetches under way and the kept ones go by it)
    const id = parseId(asked, JSON_CODEC).toString()
    const here = await this.store.manifest(id)
    if (here !== undefined) {
      this.store.touch(id)
      return here
    }
    opts.signal?.throwIfAborted()
    let f = this.fetching.get(id)
    // one its callers all left is ending: a new caller starts another
    if (f === undefined || f.ctl.signal.aborted) {
      // the fetch belongs to no caller: it ends when the last one leaves, not when the first does
      const ctl = new AbortController()
      const shared: SharedFetch = { ctl, callers: 0, settled: false, promise: Promise.resolve() as unknown as Promise<Manifest>, hints: [...(opts.holders ?? [])] }
      shared.promise = this.fetchFromHolders(id, { ...opts, holders: shared.hints, signal: ctl.signal }).finally(() => {
        shared.settled = true
        if (this.fetching.get(id) === shared) this.fetching.delete(id)
      })
      f = shared
      this.fetching.set(id, f)
    } else {
      // a caller that joins a fetch under way has the holders it names asked too
      for (const h of opts.holders ?? []) if (!f.hints.includes(h) && f.hints.length < ARTIFACT_MAX_HOLDERS_TRIED * 2) f.hints.push(h)
    }
    const shared = f
    shared.callers++
    try {
      return await untilAborted(shared.promise, opts.signal)
    } finally {
      if (--shared.callers === 0 && !shared.settled) shared.ctl.abort(new Error('every caller of the fetch left'))
    }
  }

  /** The artifact's bytes chunk by chunk (fetched first if not here), each verified. */
  async open (id: string, opts: FetchOptions = {}): Promise<{ manifest: Manifest, chunks: AsyncGenerator<Uint8Array> }> {
    const manifest = await this.fetch(id, opts)
    return { manifest, chunks: this.store.read(id, manifest) }
  }

  private announce (id: string): void {
    this.host.contentRouting.provide(parseId(id, JSON_CODEC), { signal: AbortSignal.timeout(ARTIFACT_PROVIDE_TIMEOUT_MS) }).catch((err: unknown) => {
      // a mesh too small or too young for the DHT: holders are still found by asking peers
      this.log.debug({ err, artifact: id }, 'could not announce an artifact in the DHT')
    })
  }

  /**
   * Holders to try, in order, without repeats: the hinted agents, DHT
   * providers, connected peers. `opts.holders` may grow while the fetch goes
   * on (a caller that joined it): those are asked before the next of the rest.
   * Then, once more, those in `again` (dropped for their rate bound meanwhile), hints still first.
   */
  private async * holders (id: string, opts: FetchOptions, again: readonly PeerId[]): AsyncGenerator<PeerId> {
    const seen = new Set<string>([this.host.peerId.toString()])
    let n = 0
    const fresh = (p: PeerId): boolean => {
      if (seen.has(p.toString()) || n >= ARTIFACT_MAX_HOLDERS_TRIED) return false
      seen.add(p.toString())
      n++
      return true
    }
    const hints = opts.holders ?? []
    let used = 0
    const hinted = (): PeerId[] => {
      const out: PeerId[] = []
      while (used < hints.length) {
        const agent = hints[used++] ?? ''
        try {
          const peer = peerIdOfAgent(agent)
          if (fresh(peer)) out.push(peer)
        } catch (err) {
          this.log.debug({ err, agent }, 'an artifact holder hint is not an agent id')
        }
      }
      return out
    }
    yield * hinted()
    const timeout = AbortSignal.timeout(ARTIFACT_FIND_PROVIDERS_TIMEOUT_MS)
    let providers: PeerId[] = []
    try {
      providers = await findProviders(this.host, parseId(id, JSON_CODEC), ARTIFACT_MAX_HOLDERS_TRIED, opts.signal === undefined ? timeout : AbortSignal.any([opts.signal, timeout]))
    } catch (err) {
      this.log.debug({ err, artifact: id }, 'the DHT named no providers of an artifact')
    }
    for (const p of providers) {
      yield * hinted()
      if (fresh(p)) yield p
    }
    for (const p of this.host.getPeers()) {
      yield * hinted()
      if (fresh(p)) yield p
    }
    for (const p of again) {
      yield * hinted()
      yield p
    }
    yield * hinted()
  }

  private async fetchFromHolders (id: string, opts: FetchOptions): Promise<Manifest> {
    const cid = parseId(id, JSON_CODEC)
    // the chunks fetched wait in a staged write until the artifact is whole; a fetch that failed before left its
    // write and manifest to go on from (kept.ts), and one that fails now leaves them for the next
    const f: FetchState = this.kept.take(id) ?? { w: await this.store.begin() }
    let keep = false
    try {
      const m = await this.fetchFromEach(id, cid, f, opts)
      // a fetch of it that ended meanwhile (its callers had left) may have kept chunks no one needs now
      await this.kept.drop(id)
      return m
    } catch (err) {
      // not when a commit failed (it abandoned the write) or this node's store refused a chunk (it wants the room)
      keep = f.manifest !== undefined && !f.w.settled && !storeRefused(err)
      throw err
    } finally {
      if (keep && f.manifest !== undefined) await this.kept.keep(id, { w: f.w, manifest: f.manifest })
      else await this.store.abandon(f.w)
    }
  }

  private async fetchFromEach (id: string, cid: CID, f: FetchState, opts: FetchOptions): Promise<Manifest> {
    const w = f.w
    const have: boolean[] = []
    // a chunk held here counts only at a place of its length: a manifest that puts it elsewhere is ARTIFACT_CORRUPT
    const haveOf = (m: Manifest): void => {
      const sizes = m.chunks.map(c => this.store.chunkSize(c, w))
      checkHeldLengths(id, m, i => sizes[i])
      for (let i = 0; i < m.chunks.length; i++) have[i] = sizes[i] !== undefined
    }
    if (f.manifest !== undefined) haveOf(f.manifest.m)
    let corrupt: AapError | undefined
    // holders dropped for their rate bound: asked again once every other has failed, without the bound (each chunk
    // still within ARTIFACT_CHUNK_TIMEOUT_MS), so a fetch whose only holder is slow but steady still completes
    const slow: PeerId[] = []
    let last: AapError | undefined
    let tried = 0
    let committing = false
    for await (const peer of this.holders(id, opts, slow)) {
      opts.signal?.throwIfAborted()
      const again = slow.includes(peer)
      if (!again) tried++
      let session: BulkSession | undefined
      try {
        session = await BulkSession.open(this.host, peer, ARTIFACT_PROTOCOL, {
          maxFrameBytes: Math.max(ARTIFACT_CHUNK_BYTES, ARTIFACT_MANIFEST_MAX_BYTES) + 1024,
          log: this.log,
          ...(opts.signal === undefined ? {} : { signal: opts.signal })
        })
        let manifest = f.manifest
        if (manifest === undefined) {
          const a = await session.request('manifest', { artifact: id }, ARTIFACT_CHUNK_TIMEOUT_MS)
          const bytes = a.data ?? new Uint8Array(0)
          try {
            manifest = { m: verifyManifest(cid, bytes), bytes }
            haveOf(manifest.m)
          } catch (err) {
            this.stats.rejected++
            throw ownCheck(err)
          }
          f.manifest = manifest
        }
        await this.pullChunks(session, peer, id, manifest.m, have, w, opts.signal, !again)
        await session.close()
        committing = true
        await this.store.commit(w, id, manifest.bytes)
        this.stats.fetched++
        this.announce(id)
        return manifest.m
      } catch (err) {
        const e = toAapError(err)
        session?.abort(e)
        // a commit that failed abandoned the write (its staged chunks are gone): no other holder can finish it
        if (committing || storeRefused(e) || opts.signal?.aborted === true) throw e
        if (failedOwnCheck(e)) corrupt = e
        if (droppedSlow(e)) slow.push(peer)
        last = e
        this.log.debug({ err: e, artifact: id, peer: peer.toString() }, 'an artifact holder failed; trying the next')
      }
    }
    if (corrupt !== undefined) throw corrupt
    throw new ArtifactNotFoundError(`no holder of artifact ${id} answered (${tried} tried${slow.length === 0 ? '' : `, ${slow.length} too slow`})`, { artifact: id, tried, ...(last === undefined ? {} : { last: last.code }), ...(slow.length === 0 ? {} : { too_slow: slow.length }) })
  }

  /**
   * Fetch the chunks not yet here and store each, verified, as it comes.
   * Requests in flight and chunks being written together stay within
   * ARTIFACT_FETCH_WINDOW_CHUNKS, so the fetch holds at most that many
   * chunks; a chunk's write does not hold up the next chunk's check. Every
   * write started has ended when this returns or throws (it returns only
   * once none is left). The holder has until its rate bound (fetch-bounds.ts)
   * for all of them, when `bounded`. A chunk the manifest names at several
   * indexes is asked for once, at the first; once staged, all are held.
   */
  private async pullChunks (session: BulkSession, peer: PeerId, id: string, m: Manifest, have: boolean[], w: StagedWrite, signal: AbortSignal | undefined, bounded: boolean): Promise<void> {
    const inflight: Array<{ index: number, answer: Promise<BulkAnswer> }> = []
    const writes = new Set<Promise<void>>()
    // set by a write that failed (a closure, so kept in an object the checks below read afresh)
    const failure: { err?: unknown, failed: boolean } = { failed: false }
    let next = 0
    const first = firstIndexes(m)
    const bound = bounded ? rateBound(session, peer, m, have, () => { this.stats.slowHolders++ }) : undefined
    try {
      for (;;) {
        if (failure.failed) throw failure.err
        while (inflight.length + writes.size < ARTIFACT_FETCH_WINDOW_CHUNKS && next < m.chunks.length) {
          const index = next++
          if (have[index] === true || first[index] !== index) continue
          const answer = session.request('chunk', { artifact: id, index }, ARTIFACT_CHUNK_TIMEOUT_MS)
          // when an earlier chunk fails the session is aborted and this one is never awaited
          answer.catch((err: unknown) => { this.log.debug({ err, artifact: id, index }, 'a chunk request ended with its session') })
          inflight.push({ index, answer })
        }
        const head = inflight.shift()
        if (head === undefined) {
          if (writes.size === 0) {
            if (failure.failed) throw failure.err
            return
          }
          // the window is taken by writes: wait for one to end
          await Promise.race(writes)
          continue
        }
        signal?.throwIfAborted()
        const a = await head.answer
        const bytes = a.data ?? new Uint8Array(0)
        try {
          verifyChunk(id, m, head.index, bytes)
        } catch (err) {
          this.stats.rejected++
          throw ownCheck(err)
        }
        const index = head.index
        // never rejects: a failed write is kept in `failure` and thrown by the loop
        const write: Promise<void> = this.store.stage(w, m.chunks[index] ?? '', bytes).then(() => {
          for (let i = index; i < m.chunks.length; i++) if (first[i] === index) have[i] = true
          this.stats.chunksFetched++
        }, (err: unknown) => {
          if (failure.failed) return
          failure.failed = true
          failure.err = storeError(err)
        }).finally(() => { writes.delete(write) })
        writes.add(write)
      }
    } catch (err) {
      if (writes.size > 0) await Promise.all(writes)
      // a store that is full or closed is the answer, whatever else failed meanwhile: the next holder would meet it
      // too; a holder past its rate bound failed for that, not for the requests its aborted session then refused
      throw failure.failed && storeRefused(failure.err) ? failure.err : bound?.err ?? err
    } finally {
      bound?.clear()
    }
  }
}
