/**
 * endpointsIn (src/conformance/endpoints.ts) finds a host name with a port
 * and a socket scheme as endpoint data (AAP-CARD-ENDPOINT-HIDDEN), not only
 * multiaddrs, URLs and IP literals; the names aap-mesh puts in runs and
 * events (agent ids, run ids, capability ids, versions, timestamps) stay
 * clean.
 */
import { describe, expect, it } from 'vitest'
import { endpointsIn } from '../src/conformance/endpoints.ts'

const agent = '12D3KooWHP8jJ31tCQ42oSSpRPTir3ykenymoWugUfipcdHCzkXu'

describe('endpointsIn: host names with ports and socket schemes', () => {
  it('flags localhost and dotted host names with a port, and unix:, tcp:, udp: addresses', () => {
    for (const text of [
      'localhost:4001',
      'reach me at localhost:80 please',
      'node-7.mesh.example.com:4001',
      'agent.internal:50051',
      'LOCALHOST:1',
      'unix:/var/run/x.sock',
      'tcp:host:4001',
      'udp:10.0.0.7:53',
      'via tcp:node-7.mesh.example.com:4001'
    ]) expect(endpointsIn({ payload: { note: text } }), text).toHaveLength(1)
  })

  it('does not flag run ids, agent ids, capability ids, versions, timestamps or prose', () => {
    for (const text of [
      agent,
      `${agent}:${'a1'.repeat(12)}`,
      `${agent}:${'12'.repeat(12)}`,
      `${agent}:00001`,
      'cap:aap-conformance',
      '0.1.0',
      '2026-11-23T11:33:30.264Z',
      'module std::io failed; retry at 11:33:30',
      'conf-ab12cd34-handoff',
      'cp-ab12cd34-agent',
      'run.completed',
      'ratio 3:2',
      'localhost',
      'node-7.mesh.example.com',
      'tcp: the transport',
      'attack:1'
    ]) expect(endpointsIn({ payload: { note: text } }), text).toEqual([])
  })
})
