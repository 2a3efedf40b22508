/**
 * The MCP `events` tool says how its wait ended: a stream the node ends with
 * a typed error is the tool's error (it was dropped, and the tool answered
 * as if it had waited), and a stream the node closes early is
 * `stream_closed`, not `waited`. The tool is driven with a client whose
 * stream yields what the API's SSE route would send.
 */
import { describe, expect, it } from 'vitest'
import type { ApiClient } from '../src/api/client.ts'
import { AapError } from '../src/errors.ts'
import { TOOLS } from '../src/mcp/tools.ts'

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
    expect(r).toEqual({ correlation_id: 'c1', events: [started.data], ended_by: 'stream_closed' })
  })
})
