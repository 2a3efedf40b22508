/**
 * An A2A server's card is input of any shape: one whose fields the bridge
 * reads have the wrong shape is refused with INVALID_REQUEST naming the
 * field, never a TypeError (which the API would answer INTERNAL). Adds made
 * at once hold their places among A2A_OUTBOUND_AGENTS_MAX before they fetch
 * their cards, so they cannot pass it, and two adds of one URL give one agent.
 * Real nodes, a hand-made server on 127.0.0.1.
 */
import { once } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { A2A_OUTBOUND_AGENTS_MAX } from '../src/a2a/constants.ts'
import { A2aOutbound } from '../src/a2a/outbound.ts'
import { AapError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'
import { a2aCardJson } from './fixtures/a2a-card-json.ts'

function card (url: string, skill: string): Record<string, unknown> {
  return a2aCardJson({ name: 'shape-test', skill, url, tags: ['t'] })
}

describe('A2A outbound: the card an A2A server sends', () => {
  let nodes: MeshNode[] = []
  let server: Server
  let url = ''
  const malformed: Record<string, { card: unknown, says: string }> = {}

  beforeAll(async () => {
    nodes = await startMesh(1, { transport: 'tcp' })
    server = createServer((req, res) => {
      const key = req.url?.split('/')[1] ?? ''
      res.writeHead(200, { 'content-type': 'application/json' })
      // any other path is an agent of its own: the skill is named by the path
      res.end(JSON.stringify(key in malformed ? malformed[key]!.card : card(`${url}/${key}`, key)))
    })
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const good = card(url, 's')
    const iface = { url: `${url}/rpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' }
    Object.assign(malformed, {
      nullcard: { card: null, says: 'not a JSON object' },
      list: { card: [good], says: 'not a JSON object' },
      empty: { card: {}, says: 'name is not a string' },
      noversion: { card: { ...good, version: undefined }, says: 'version is not a string' },
      numericname: { card: { ...good, name: 7 }, says: 'name is not a string' },
      numericdescription: { card: { ...good, description: 7 }, says: 'description is not a string' },
      nointerfaces: { card: { ...good, supportedInterfaces: undefined }, says: 'supportedInterfaces is not a list' },
      interfacesobject: { card: { ...good, supportedInterfaces: { 0: iface } }, says: 'supportedInterfaces is not a list' },
      interfacenoversion: { card: { ...good, supportedInterfaces: [{ ...iface, protocolVersion: undefined }] }, says: 'offers no A2A 1.x' },
      interfacenull: { card: { ...good, supportedInterfaces: [null, 5] }, says: 'offers no A2A 1.x' },
      interfacebadtenant: { card: { ...good, supportedInterfaces: [{ ...iface, tenant: 5 }] }, says: 'offers no A2A 1.x' },
      noskills: { card: { ...good, skills: undefined }, says: 'skills is not a list' },
      skillnull: { card: { ...good, skills: [null] }, says: 'skills[0] has no string id' },
      numericid: { card: { ...good, skills: [{ id: 5, tags: [] }] }, says: 'skills[0] has no string id' },
      badtags: { card: { ...good, skills: [{ id: 'x', tags: 'a,b' }] }, says: 'skills[0].tags is not a list of strings' },
      numerictags: { card: { ...good, skills: [{ id: 'x', tags: [1] }] }, says: 'skills[0].tags is not a list of strings' },
      badcapabilities: { card: { ...good, capabilities: 'streaming' }, says: 'capabilities is not an object' }
    })
  })
  afterAll(async () => {
    server?.closeAllConnections()
    server?.close()
    await stopAll(nodes)
  })

  it('refuses each malformed card with INVALID_REQUEST naming what is wrong', async () => {
    for (const [key, { says }] of Object.entries(malformed)) {
      const err = await rejectsWith(new A2aOutbound(nodes[0]!, silentLogger()).add(`${url}/${key}`), 'INVALID_REQUEST')
      expect(err.message, key).toContain(says)
    }
  })

  it('takes a card that leaves out what it may: a skill\'s tags, the description, the capabilities', async () => {
    malformed.lean = { card: { ...card(`${url}/lean`, 'lean'), description: undefined, capabilities: undefined, skills: [{ id: 'lean' }] }, says: '' }
    const agent = await new A2aOutbound(nodes[0]!, silentLogger()).add(`${url}/lean`)
    expect(agent.draft.capabilities).toEqual([{ capability_id: 'a2a:lean', version: '1' }])
    expect(agent.draft.tags).toEqual(['a2a'])
    expect(agent.card.description).toBe('')
  })

  it(`lets adds made at once bridge at most A2A_OUTBOUND_AGENTS_MAX (${A2A_OUTBOUND_AGENTS_MAX}) agents`, async () => {
    const out = new A2aOutbound(nodes[0]!, silentLogger())
    const tries = Array.from({ length: A2A_OUTBOUND_AGENTS_MAX + 3 }, async (_, i) => out.add(`${url}/agent-${i}`).then(() => 'added', (e: unknown) => e))
    const results = await Promise.all(tries)
    expect(results.filter(r => r === 'added')).toHaveLength(A2A_OUTBOUND_AGENTS_MAX)
    for (const r of results.filter(r => r !== 'added')) {
      expect(r).toBeInstanceOf(AapError)
      expect((r as AapError).message).toContain(`at most ${A2A_OUTBOUND_AGENTS_MAX} A2A agents`)
    }
    expect(out.list()).toHaveLength(A2A_OUTBOUND_AGENTS_MAX)
  })

  it('gives two adds of one URL made at once the same agent', async () => {
    const out = new A2aOutbound(nodes[0]!, silentLogger())
    const [first, second] = await Promise.all([out.add(`${url}/twice`), out.add(`${url}/twice/`)])
    expect(second).toBe(first)
    expect(out.list()).toHaveLength(1)
  })
})
