/**
 * JSON nested thousands of levels deep: JSON.parse takes it, the node's own
 * encoders (JSON.stringify, the canonical form of a signed record) ran out of
 * stack on it, and a stranger's 12 KiB frame came back INTERNAL with an error
 * logged. A frame past FRAME_JSON_MAX_DEPTH is INVALID_REQUEST (too_deep) now,
 * and a local caller's too-deep input too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { nestedDeeperThan } from '../src/util/json-depth.ts'
import { FRAME_JSON_MAX_DEPTH } from '../src/wire/network-constants.ts'
import { PAYLOAD_MAX_DEPTH } from '../src/runs/constants.ts'
import { RawWire, rawFrame } from './fixtures/raw-wire.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const ECHO = { capability_id: 'cap:echo-depth', version: '1.0.0' }

/** `{"a":[[[...]]]}` with `levels` arrays inside the object. */
function deepText (levels: number): string {
  return `{"a":${'['.repeat(levels)}${']'.repeat(levels)}}`
}

function deepValue (levels: number): Record<string, unknown> {
  let v: unknown = []
  for (let i = 1; i < levels; i++) v = [v]
  return { a: v }
}

describe('how deep a value nests', () => {
  it('counts objects and arrays, the outermost as level 1, and stops at the bound', () => {
    const v = JSON.parse('{"a":[1,{"b":[]}],"s":"[[[[{{{{"}') as unknown
    expect(nestedDeeperThan(v, 4)).toBe(false)
    expect(nestedDeeperThan(v, 3)).toBe(true)
    expect(nestedDeeperThan('[[[[', 0)).toBe(false)
    expect(nestedDeeperThan(null, 0)).toBe(false)
    expect(nestedDeeperThan({}, 0)).toBe(true)
    expect(nestedDeeperThan({}, 1)).toBe(false)
    // far past any stack: the walk stops at the bound
    expect(nestedDeeperThan(deepValue(50_000), FRAME_JSON_MAX_DEPTH)).toBe(true)
    expect(nestedDeeperThan(JSON.parse('{"__proto__":{"a":[[]]}}'), 3)).toBe(true)
  })
})

describe('deeply nested JSON on the wire and from a local caller', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(ECHO, async (ctx) => ({ echoed: ctx.input }))
    await B.publishCard({ name: 'b', capabilities: [ECHO] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a frame nested 6000 levels deep is answered INVALID_REQUEST too_deep, and the stream goes on', async () => {
    const body = `{"to_agent":"${B.agentId}","task_id":"task-deep","capability":{"capability_id":"cap:echo-depth","version":"1.0.0"},"parent_run":null,"input":${deepText(6000)}}`
    const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
    try {
      w.write(rawFrame(`{"id":1,"type":"delegate","body":${body}}`))
      const f = await w.next()
      expect(f.ok).toBe(false)
      expect(f.error?.code).toBe('INVALID_REQUEST')
      expect(f.error?.details?.reason).toBe('too_deep')
      expect(f.id).toBeNull()
      // the same stream still answers: a well-formed frame after it gets its own answer
      w.write(rawFrame('{"id":2,"type":"no-such-type","body":{}}'))
      const g = await w.next()
      expect(g.id).toBe(2)
      expect(g.error?.code).toBe('INVALID_REQUEST')
    } finally {
      w.abort()
    }
  })

  it('an input at the payload bound is delegated, run and its output read back', async () => {
    const input = deepValue(PAYLOAD_MAX_DEPTH - 1)
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-deep-ok', capability: ECHO, input })
    await until(async () => (await A.getRun(run.run_id)).state === 'completed', 'the run completes')
    expect((await A.getRun(run.run_id)).output).toEqual({ echoed: input })
  })

  it('an input past the payload bound, though within the frame\'s, is INVALID_REQUEST too_deep at the executor too', async () => {
    const body = `{"to_agent":"${B.agentId}","task_id":"task-deep-mid","capability":{"capability_id":"cap:echo-depth","version":"1.0.0"},"parent_run":null,"input":${deepText(PAYLOAD_MAX_DEPTH + 1)}}`
    const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
    try {
      w.write(rawFrame(`{"id":1,"type":"delegate","body":${body}}`))
      const f = await w.next()
      expect(f.error?.code).toBe('INVALID_REQUEST')
      expect(f.error?.details?.reason).toBe('too_deep')
    } finally {
      w.abort()
    }
  })

  it('a local caller\'s input thousands of levels deep is INVALID_REQUEST too_deep, not INTERNAL', async () => {
    const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-deep-local', capability: ECHO, input: deepValue(20_000) }), 'INVALID_REQUEST')
    expect(err.details?.reason).toBe('too_deep')
  })
})
