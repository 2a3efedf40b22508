/**
 * The MCP `events` tool says how its wait ended: a stream the node ends with
 * a typed error is the tool's error (it was dropped, and the tool answered
 * as if it had waited), and a stream the node closes early is
 * `stream_closed`, not `waited`. A call that a bound stopped is continued by
 * the next with its cursor (`after`). The tool is driven with a client whose
 * stream yields what the API's SSE route would send.
 */
import { describe, expect, it } from 'vitest'
import type { ApiClient } from '../src/api/client.ts'
import { AapError } from '../src/errors.ts'
import { TOOLS } from '../src/mcp/tools.ts'
import { MCP_EVENTS_MAX, MCP_RESULT_MAX_BYTES } from '../src/mcp/constants.ts'
import { EVENTS_MAX_EVENTS_PER_RUN, EVENTS_MAX_RUNS_PER_CORRELATION, RUN_ID_MAX_CHARS } from '../src/constants.ts'
import { Ajv } from 'ajv'

type Sse = { event: string, data: unknown }

const events = TOOLS.find(t => t.name === 'events')!

function clientOf (sse: Sse[]): ApiClient {
  return {
    async * stream () { for (const e of sse) yield e }
  } as unknown as ApiClient
}

const started = { event: 'run.started', data: { type: 'run.started', seq: 1 } }

describe('the MCP events tool', () => {
  it('raises the error a node ends its event stream with', async () => {
    const err = await events.run(clientOf([started, { event: 'ready', data: {} }, { event: 'error', data: { error: { code: 'STORAGE_FULL', message: 'the subscription failed' } } }]), { correlation_id: 'c1', wait_ms: 5_000 })
      .then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(AapError)
    expect(err).toMatchObject({ code: 'STORAGE_FULL', message: 'the subscription failed' })
  })

  it('says the node closed the stream when it ends before the wait is over', async () => {
    const r = await events.run(clientOf([started, { event: 'ready', data: {} }]), { correlation_id: 'c1', wait_ms: 5_000 })
    expect(r).toEqual({ correlation_id: 'c1', events: [started.data], ended_by: 'stream_closed', after: {} })
  })

  it('goes on where a bound stopped it: the next call with the result\'s `after` returns the events after it', async () => {
    const ev = (run: string, seq: number): Sse => ({ event: seq === 1 ? 'run.started' : 'run.progress', data: { run_id: run, seq } })
    // more history than one call returns, over two runs
    const history: Sse[] = []
    for (let seq = 1; seq <= MCP_EVENTS_MAX; seq++) history.push(ev('r1', seq), ev('r2', seq))
    const sse = [...history, { event: 'ready', data: {} }]
    const first = await events.run(clientOf(sse), { correlation_id: 'c1', wait_ms: 0 }) as { events: Array<{ run_id: string, seq: number }>, ended_by: string, after: Record<string, number> }
    expect(first.ended_by).toBe('max_events')
    expect(first.events).toHaveLength(MCP_EVENTS_MAX)
    expect(first.after).toEqual({ r1: MCP_EVENTS_MAX / 2, r2: MCP_EVENTS_MAX / 2 })
    const second = await events.run(clientOf(sse), { correlation_id: 'c1', wait_ms: 0, after: first.after }) as typeof first
    expect(second.events).toEqual(history.slice(MCP_EVENTS_MAX).map(e => e.data))
    // the cursor carries every run seen, including those of earlier calls
    expect(second.after).toEqual({ r1: MCP_EVENTS_MAX, r2: MCP_EVENTS_MAX })
    const third = await events.run(clientOf(sse), { correlation_id: 'c1', wait_ms: 0, after: second.after }) as typeof first
    expect(third.events).toEqual([])
    expect(third.after).toEqual(second.after)
  })

  it('bounds the cursor it takes: runs of one correlation, run ids, seqs', () => {
    const check = new Ajv({ strict: false, allowUnionTypes: true }).compile(events.inputSchema)
    expect(check({ correlation_id: 'c1', after: { r1: 3 } })).toBe(true)
    expect(check({ correlation_id: 'c1', after: { r1: -1 } })).toBe(false)
    expect(check({ correlation_id: 'c1', after: { r1: EVENTS_MAX_EVENTS_PER_RUN + 1 } })).toBe(false)
    expect(check({ correlation_id: 'c1', after: { ['x'.repeat(RUN_ID_MAX_CHARS + 1)]: 1 } })).toBe(false)
    expect(check({ correlation_id: 'c1', after: Object.fromEntries(Array.from({ length: EVENTS_MAX_RUNS_PER_CORRELATION + 1 }, (_, i) => [`r${i}`, 1])) })).toBe(false)
    // names no run id can have (the RunId pattern of protocols/common.schema.json)
    expect(check({ correlation_id: 'c1', after: { 'peer:run/1': 1 } })).toBe(true)
    expect(check({ correlation_id: 'c1', after: { 'r%2F1': 1 } })).toBe(false)
    expect(check({ correlation_id: 'c1', after: { 'r 1': 1 } })).toBe(false)
    expect(check({ correlation_id: 'c1', after: { '..': 1 } })).toBe(false)
  })

  it('returns the executor\'s event that replaces a liveness verdict at its seq, and its cursor stops before a verdict', async () => {
    const ev = (type: string, seq: number, verdict = false): Sse => ({ event: type, data: { run_id: 'r1', seq, type, ...(verdict ? { declared_by: 'delegator' } : {}) } })
    const verdict = ev('run.failed', 2, true)
    const completed = ev('run.completed', 2)
    // in one call: the verdict, then the executor's own event at the same seq, which stands
    const one = await events.run(clientOf([ev('run.started', 1), verdict, completed, { event: 'ready', data: {} }]), { correlation_id: 'c1', until: 'run.completed', wait_ms: 5_000 }) as { events: unknown[], ended_by: string, after: Record<string, number> }
    expect(one.ended_by).toBe('until')
    expect(one.events).toEqual([ev('run.started', 1).data, verdict.data, completed.data])
    expect(one.after).toEqual({ r1: 2 })
    // a call that returned the verdict last: its cursor names the seq before it
    const first = await events.run(clientOf([ev('run.started', 1), verdict, { event: 'ready', data: {} }]), { correlation_id: 'c1', wait_ms: 0 }) as typeof one
    expect(first.events).toEqual([ev('run.started', 1).data, verdict.data])
    expect(first.after).toEqual({ r1: 1 })
    // so the next call gets the replacement (the node's log holds it now), or the verdict again
    const next = await events.run(clientOf([ev('run.started', 1), completed, { event: 'ready', data: {} }]), { correlation_id: 'c1', wait_ms: 0, after: first.after }) as typeof one
    expect(next.events).toEqual([completed.data])
    expect(next.after).toEqual({ r1: 2 })
    const again = await events.run(clientOf([ev('run.started', 1), verdict, { event: 'ready', data: {} }]), { correlation_id: 'c1', wait_ms: 0, after: first.after }) as typeof one
    expect(again.events).toEqual([verdict.data])
    expect(again.after).toEqual({ r1: 1 })
    // a second verdict at the seq is no replacement, and nothing older comes through
    const dup = await events.run(clientOf([ev('run.started', 1), verdict, verdict, ev('run.started', 1), { event: 'ready', data: {} }]), { correlation_id: 'c1', wait_ms: 0 }) as typeof one
    expect(dup.events).toEqual([ev('run.started', 1).data, verdict.data])
  })

  it('counts the cursor it echoes against the byte bound: a call stopped by max_bytes is a result an MCP client takes', async () => {
    // a cursor naming as many runs as a correlation holds, each id as long as a run id may be
    const runs = Array.from({ length: EVENTS_MAX_RUNS_PER_CORRELATION }, (_, i) => `${String(i).padStart(4, '0')}${'r'.repeat(RUN_ID_MAX_CHARS - 4)}`)
    const after = Object.fromEntries(runs.map(r => [r, 1]))
    const chunk = 'x'.repeat(40 * 1024)
    const sse: Sse[] = Array.from({ length: 80 }, (_, i) => ({ event: 'run.progress', data: { run_id: runs[0], seq: i + 2, type: 'run.progress', payload: { chunk } } }))
    sse.push({ event: 'ready', data: {} })
    const r = await events.run(clientOf(sse), { correlation_id: 'c1', wait_ms: 0, after }) as { events: unknown[], ended_by: string, after: Record<string, number> }
    expect(r.ended_by).toBe('max_bytes')
    expect(r.events.length).toBeGreaterThan(0)
    expect(Object.keys(r.after)).toHaveLength(EVENTS_MAX_RUNS_PER_CORRELATION)
    expect(Buffer.byteLength(JSON.stringify(r))).toBeLessThanOrEqual(MCP_RESULT_MAX_BYTES)
  })
})
