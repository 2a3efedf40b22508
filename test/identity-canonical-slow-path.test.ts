/**
 * canonicalJson's slow path (`written`, taken when a value holds an object whose index-like keys are
 * out of text order, e.g. {"2":..,"10":..}) writes what JSON.stringify writes. Found by session 46's
 * review: it wrote an array's undefined as nothing ("[1,,2]", not JSON) and a Date as {}. A handler's
 * ordinary output then signed a run.completed no node could parse: the delegator never saw the run end,
 * and every read of the executor's log (replay, sync) failed with a SyntaxError.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { canonicalJson } from '../src/identity/signing.ts'
import type { MeshNode } from '../src/node.ts'
import { collect } from './events-helpers.ts'
import { nextEvent, startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:canon-slow', version: '1.0.0' }

describe('canonicalJson writes what JSON.stringify writes, whatever the key order', () => {
  it('the slow path gives the same members as the fast one', () => {
    const fast = { counts: { '1': 1, '2': 2 }, items: [1, undefined, 2], when: new Date(0) }
    const slow = { counts: { '2': 2, '10': 1 }, items: [1, undefined, 2], when: new Date(0) }
    expect(canonicalJson(fast)).toBe('{"counts":{"1":1,"2":2},"items":[1,null,2],"when":"1970-01-01T00:00:00.000Z"}')
    expect(canonicalJson(slow)).toBe('{"counts":{"10":1,"2":2},"items":[1,null,2],"when":"1970-01-01T00:00:00.000Z"}')
    expect(() => JSON.parse(canonicalJson(slow))).not.toThrow()
    // a function member is left out, a boxed primitive is its primitive, as JSON.stringify does
    expect(canonicalJson({ '10': 1, '9': new String('s'), f: () => 1 })).toBe('{"10":1,"9":"s"}')
  })

  it('a real hole of an array is null on both paths (found by session 58\'s review: the slow path wrote "[1,,2]")', () => {
    const holes = (): unknown[] => {
      const a = new Array<unknown>(4)
      a[0] = 'a'
      a[2] = 'c'
      return a
    }
    expect(canonicalJson({ counts: { '1': 1 }, notes: holes() })).toBe('{"counts":{"1":1},"notes":["a",null,"c",null]}')
    const slow = canonicalJson({ counts: { '2': 2, '10': 1 }, notes: holes() })
    expect(slow).toBe('{"counts":{"10":1,"2":2},"notes":["a",null,"c",null]}')
    expect(JSON.parse(slow)).toEqual({ counts: { 10: 1, 2: 2 }, notes: ['a', null, 'c', null] })
  })

  describe('real nodes', () => {
    let nodes: MeshNode[] = []
    let A: MeshNode, B: MeshNode
    beforeAll(async () => {
      nodes = await startMesh(2)
      ;[A, B] = nodes as [MeshNode, MeshNode]
      // an ordinary handler output: line numbers as keys, an array with an undefined and one with a real hole
      const holes = new Array<string>(3)
      holes[0] = 'a'
      holes[2] = 'c'
      B.runs.handle(CAP, async () => ({ by_line: { '2': 'ok', '10': 'nit' }, notes: ['a', undefined, 'c'] as unknown as string[], holes }))
      await B.publishCard({ name: 'b', capabilities: [CAP] })
    })
    afterAll(async () => { await stopAll(nodes) })

    it('a run whose output holds {"2":..,"10":..} and an array hole completes, and its delegator sees the end', async () => {
      const ended = nextEvent(B, e => e.type === 'run.completed' || e.type === 'run.failed')
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-canon-slow', capability: CAP, input: {} })
      const watch = await collect(A, 'task-canon-slow', { runs: [run.run_id] })
      const end = await ended
      expect(end.type).toBe('run.completed')
      // the delegator gets the completion (gossip or sync)
      await watch.until(es => es.some(e => e.type === 'run.completed'), 'the completion at the delegator', 15_000)
      // and the executor's own log reads back (its stored canonical text is JSON)
      const replay = await B.events.replay('task-canon-slow')
      expect(replay.events.map(e => e.type)).toContain('run.completed')
    })
  })
})
