/**
 * What a V8 heap snapshot holds, by kind: self size summed per constructor
 * (objects, closures, native objects) or per type (strings, arrays, code...).
 * Reads the snapshot's numbers straight from the file's bytes, so a snapshot
 * of several hundred MB needs no JSON.parse of the whole text.
 */
import { readFile } from 'node:fs/promises'

export interface HeapKind { what: string, bytes: number, count: number }

interface SnapshotMeta { node_fields: string[], node_types: [string[], ...unknown[]], edge_fields: string[], edge_types: [string[], ...unknown[]] }

/** A snapshot file's bytes, where its node and edge arrays start, its field layout and its strings. */
interface Snapshot { buf: Buffer, nodesAt: number, edgesAt: number, meta: SnapshotMeta, strings: string[] }

async function readSnapshot (path: string): Promise<Snapshot> {
  const buf = await readFile(path)
  const nodesAt = buf.indexOf('"nodes":[')
  const edgesAt = buf.indexOf('"edges":[')
  const stringsAt = buf.indexOf('"strings":[')
  if (nodesAt < 0 || edgesAt < 0 || stringsAt < 0) throw new Error(`${path} is not a V8 heap snapshot`)
  const header = buf.toString('utf8', 0, nodesAt).trim().replace(/,$/, '')
  const meta = (JSON.parse(`${header}}`) as { snapshot: { meta: SnapshotMeta } }).snapshot.meta
  const strings = JSON.parse(buf.toString('utf8', stringsAt + '"strings":'.length, buf.lastIndexOf(']') + 1)) as string[]
  return { buf, nodesAt, edgesAt, meta, strings }
}

/** The numbers of a JSON array of non-negative integers between byte offsets, handed to `each` in order. */
function eachNumber (buf: Buffer, from: number, to: number, each: (n: number) => void): void {
  let n = 0
  let inNumber = false
  for (let i = from; i < to; i++) {
    const c = buf[i] ?? 0
    if (c >= 48 && c <= 57) {
      n = n * 10 + (c - 48)
      inNumber = true
    } else if (inNumber) {
      each(n)
      n = 0
      inNumber = false
    }
  }
  if (inNumber) each(n)
}

/** The `top` biggest kinds of a heap snapshot file by self size. */
export async function summarizeHeapSnapshot (path: string, top = 20): Promise<HeapKind[]> {
  const { buf, nodesAt, edgesAt, meta, strings } = await readSnapshot(path)
  const width = meta.node_fields.length
  const typeAt = meta.node_fields.indexOf('type')
  const nameAt = meta.node_fields.indexOf('name')
  const sizeAt = meta.node_fields.indexOf('self_size')
  const types = meta.node_types[0]
  const byName = new Set(['object', 'closure', 'native'])
  const kinds = new Map<string, HeapKind>()
  const row: number[] = []
  eachNumber(buf, nodesAt + '"nodes":['.length, edgesAt, (n) => {
    row.push(n)
    if (row.length < width) return
    const type = types[row[typeAt] ?? 0] ?? 'unknown'
    const what = byName.has(type) ? `${strings[row[nameAt] ?? 0] ?? '?'} (${type})` : `(${type})`
    const k = kinds.get(what) ?? { what, bytes: 0, count: 0 }
    k.bytes += row[sizeAt] ?? 0
    k.count++
    kinds.set(what, k)
    row.length = 0
  })
  return [...kinds.values()].sort((a, b) => b.bytes - a.bytes).slice(0, top)
}

/** Large ArrayBuffer backing stores of a snapshot, by what keeps them alive. */
export interface HeldBuffers { chain: string, bytes: number, count: number }

/**
 * Backing stores of at least `minBytes` grouped by their retainer chain
 * (`levels` steps up, the first strong retainer that is not a context or a
 * hidden node at each step): which objects keep large buffers alive.
 */
export async function bigBufferRetainers (path: string, minBytes = 64 * 1024, levels = 5, top = 10): Promise<HeldBuffers[]> {
  const { buf, nodesAt, edgesAt, meta, strings } = await readSnapshot(path)
  const nodes: number[] = []
  eachNumber(buf, nodesAt + '"nodes":['.length, edgesAt, n => { nodes.push(n) })
  const edges: number[] = []
  eachNumber(buf, edgesAt + '"edges":['.length, buf.indexOf(']', edgesAt), n => { edges.push(n) })
  const NF = meta.node_fields.length
  const EF = meta.edge_fields.length
  const [tI, nI, sI, ecI] = ['type', 'name', 'self_size', 'edge_count'].map(f => meta.node_fields.indexOf(f)) as [number, number, number, number]
  const [eT, eTo] = ['type', 'to_node'].map(f => meta.edge_fields.indexOf(f)) as [number, number]
  const types = meta.node_types[0]
  const edgeTypes = meta.edge_types[0]
  const count = nodes.length / NF
  const nameOf = (i: number): string => {
    const t = types[nodes[i * NF + tI] ?? 0] ?? '?'
    return t === 'object' || t === 'closure' || t === 'native' ? strings[nodes[i * NF + nI] ?? 0] ?? '?' : `(${t})`
  }
  const retainers = new Map<number, number[]>()
  for (let i = 0, e = 0; i < count; i++) {
    const ec = nodes[i * NF + ecI] ?? 0
    for (let k = 0; k < ec; k++, e += EF) {
      if (edgeTypes[edges[e + eT] ?? 0] === 'weak') continue
      const to = (edges[e + eTo] ?? 0) / NF
      const r = retainers.get(to)
      if (r === undefined) retainers.set(to, [i])
      else r.push(i)
    }
  }
  const skip = new Set(['(hidden)', 'system / Context'])
  const chains = new Map<string, HeldBuffers>()
  for (let i = 0; i < count; i++) {
    const size = nodes[i * NF + sI] ?? 0
    if (size < minBytes || nameOf(i) !== 'system / JSArrayBufferData') continue
    const path: string[] = []
    let cur = i
    for (let d = 0; d < levels; d++) {
      const rs = retainers.get(cur) ?? []
      const up = rs.find(x => !skip.has(nameOf(x))) ?? rs[0]
      if (up === undefined) break
      path.push(nameOf(up))
      cur = up
    }
    const chain = path.join(' ← ')
    const c = chains.get(chain) ?? { chain, bytes: 0, count: 0 }
    c.bytes += size
    c.count++
    chains.set(chain, c)
  }
  return [...chains.values()].sort((a, b) => b.bytes - a.bytes).slice(0, top)
}
