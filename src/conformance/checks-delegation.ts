/** Checks of discovery, delegation and the error codes of delegation and unknown runs. */
import { verifyCard, type AgentCard } from '../card/card.ts'
import { CARD_PROTOCOL, CONTROL_PROTOCOL, DELEGATE_PROTOCOL } from '../constants.ts'
import { firstRoutingPeer, routingTableOf } from '../card/routing-view.ts'
import { createMeshNode } from '../node.ts'
import { encodeFrame } from '../wire/rpc.ts'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import {
  CONFORMANCE_CAPABILITY, HANDOFF_STALL_PATIENCE_MS, KIT_DIAL_TIMEOUT_MS, KIT_DISCOVER_TIMEOUT_MS, KIT_REACH_TIMEOUT_MS, KIT_POLL_INTERVAL_MS, KIT_SPLIT_FRAME_GAP_MS, KIT_WAIT_TIMEOUT_MS, STALLED_CALLER_PATIENCE_MS
} from './constants.ts'
import { errorText, expect, Undecided, type Scope, type WireEvent } from './kit.ts'
import { WireFailure } from '../wire/raw.ts'
import { capabilityTransportIn } from './endpoints.ts'
import { blockedRun, fail, heldRun, payloadOf, release, type Check } from './checks-common.ts'
import { DISCOVER_TAGS_CHECK } from './checks-discovery.ts'

const UNSUPPORTED = { capability_id: 'cap:aap-conformance-unsupported', version: '0.1.0' }

/**
 * The agent's card asked of the agent itself by the bystander (one get_card,
 * answered within KIT_WAIT_TIMEOUT_MS), verified as its own: a copy the kit's
 * own nodes hold in the DHT shows nothing of the target. Not getCard, whose
 * DHT fallback answers once the agent has been slow a second, so a loaded
 * honest target would be reported as not answering.
 */
async function agentCard (s: Scope, agentId: string): Promise<AgentCard> {
  const f = await s.call(s.n.bystander, CARD_PROTOCOL, 'get_card', {}, { timeoutMs: KIT_WAIT_TIMEOUT_MS }, peerIdFromString(agentId))
  expect(f.ok, `the agent ${agentId} did not answer get_card with its card: ${errorText(f)}`)
  try {
    return await verifyCard(f.body?.card, { expectAgent: agentId })
  } catch (err) {
    return fail(`the card ${agentId} answered get_card with is not its valid card: ${(err as Error).message}`)
  }
}

/**
 * A node of the kit's that knows the target only by its card (never given a
 * multiaddr of it: it joins through the kit's delegator) reaches it by the
 * card's agent id with one get_run, answered with any frame.
 */
async function reachByCard (s: Scope, card: AgentCard): Promise<void> {
  const via = s.n.delegator.addresses.filter(a => a.startsWith('/ip4/127.0.0.1/') || a.startsWith('/ip6/::1/'))
  const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, followDelegations: false })
  try {
    await node.start()
    const joined = await node.join(via.map(a => a.includes('/p2p/') ? a : `${a}/p2p/${s.n.delegator.agentId}`), AbortSignal.timeout(KIT_DIAL_TIMEOUT_MS))
    expect(joined > 0, 'the kit\'s card-only node could not join the kit\'s delegator')
    // its lookups start once the delegator is in its routing table (the delegator's identify told it the DHT is served)
    const routing = routingTableOf(node.host.services.dht)
    if (routing !== undefined && !await firstRoutingPeer(routing, AbortSignal.timeout(KIT_REACH_TIMEOUT_MS))) s.note(`the card-only node's routing table stayed empty ${KIT_REACH_TIMEOUT_MS} ms`)
    const peer = peerIdFromString(card.agent_id)
    let f
    try {
      // the card's endpoint is /p2p/<agent id>: the runtime resolves it through peer routing, then dials
      const found = await node.host.peerRouting.findPeer(peer, { signal: AbortSignal.timeout(KIT_REACH_TIMEOUT_MS) })
      s.note(`peer routing resolved ${card.endpoint} to ${found.multiaddrs.length} address(es)`)
      f = await s.call(node, CONTROL_PROTOCOL, 'get_run', { run_id: `${card.agent_id}:${'00'.repeat(12)}` }, { timeoutMs: KIT_REACH_TIMEOUT_MS, dialTimeoutMs: KIT_REACH_TIMEOUT_MS, probe: true }, peer)
    } catch (err) {
      return fail(`a node that knows only the card (endpoint ${card.endpoint}) could not reach agent ${card.agent_id}: ${(err as Error).message}`)
    }
    s.note(`a card-only node reached ${card.agent_id} by its agent id: get_run answered ${f.ok ? 'ok' : String(f.error?.code)}`)
  } finally {
    await node.stop().catch((err: unknown) => { s.note(`the card-only node did not stop cleanly: ${(err as Error).message}`) })
  }
}

export const DELEGATION_CHECKS: Check[] = [
  {
    id: 'discover',
    title: 'discover by the conformance CapabilityRef finds the target\'s card, and the card it names is reachable',
    run: async (s) => {
      const deadline = Date.now() + KIT_DISCOVER_TIMEOUT_MS
      let found: AgentCard | undefined
      let lastError = ''
      while (found === undefined) {
        try {
          const cards = await s.n.delegator.discover({ capability: CONFORMANCE_CAPABILITY, tags: null }, { fresh: true, signal: AbortSignal.timeout(KIT_DISCOVER_TIMEOUT_MS) })
          found = cards.find(c => c.agent_id === s.kit.target)
          if (found === undefined) lastError = `found ${cards.length} card(s), none of the target`
        } catch (err) {
          lastError = (err as Error).message
        }
        if (found === undefined && Date.now() > deadline) fail(`discover did not find the target within ${KIT_DISCOVER_TIMEOUT_MS} ms: ${lastError}`)
        if (found === undefined) await new Promise(resolve => setTimeout(resolve, KIT_POLL_INTERVAL_MS * 20))
        s.live()
      }
      s.note(`card of ${found.agent_id} seq ${found.seq}, ${found.capabilities.length} capabilities`)
      // the card's endpoint data is enough to reach the agent: a fresh card straight from it (not a copy the kit's nodes hold)
      const fresh = await agentCard(s, found.agent_id)
      expect(fresh.agent_id === s.kit.target, 'the card fetched from the discovered agent names another agent')
      await reachByCard(s, found)
    }
  },
  DISCOVER_TAGS_CHECK,
  {
    id: 'card-capref',
    title: 'the target\'s card lists capabilities as CapabilityRef values {capability_id, version} only',
    run: async (s) => {
      const card = await agentCard(s, s.kit.target)
      expect(card.capabilities.length > 0, 'the card declares no capability')
      for (const c of card.capabilities as unknown as Array<Record<string, unknown>>) {
        const keys = Object.keys(c).sort().join(',')
        expect(keys === 'capability_id,version', `capability ${JSON.stringify(c)} is not a CapabilityRef (members ${keys})`)
        expect(typeof c.capability_id === 'string' && c.capability_id.startsWith('cap:'), `capability_id ${String(c.capability_id)} is not a CAP id`)
        expect(typeof c.version === 'string' && c.version.length > 0, `capability ${String(c.capability_id)} has no version`)
      }
      expect(card.capabilities.some(c => c.capability_id === CONFORMANCE_CAPABILITY.capability_id && c.version === CONFORMANCE_CAPABILITY.version),
        'the card does not declare the conformance capability')
    }
  },
  {
    id: 'delegate-async',
    title: 'delegate answers with a running Run handle while the work is still going on',
    run: async (s) => {
      const run = await heldRun(s, 'async')
      expect(run.agent_id === s.kit.target, `the handle names agent ${run.agent_id}, not the target`)
      const again = await s.getRun(run.run_id)
      expect(again.state === 'running', `get_run after delegate: ${again.state}`)
      await release(s, run.run_id)
    }
  },
  {
    id: 'delegate-correlation',
    title: 'task_id becomes Run.correlation_id on the handle, get_run and the run.started event',
    run: async (s) => {
      const task = s.kit.task('corr')
      const run = s.runOf(await s.delegate('corr', { op: 'complete' }), 'delegate')
      expect(run.correlation_id === task, `handle correlation_id ${run.correlation_id} != task_id ${task}`)
      const done = await s.waitType(run.run_id, 'run.completed')
      expect(done !== undefined, 'no run.completed')
      const read = await s.getRun(run.run_id)
      expect(read.correlation_id === task, `get_run correlation_id ${read.correlation_id} != task_id ${task}`)
      const started = (s.kit.events.get(run.run_id) ?? []).find(e => e.type === 'run.started')
      expect(started?.correlation_id === task, `run.started correlation_id ${String(started?.correlation_id)} != task_id`)
    }
  },
  {
    id: 'capability-by-ref',
    title: 'a delegation names the capability by CapabilityRef alone, and the run carries exactly that ref; no Run, event or card capability ref the kit read says how the capability is reached (an MCP stdio or SSE, local function or Skills runtime scheme, a transport member; in a capability ref also a URL, a multiaddr or an address)',
    run: async (s) => {
      const run = s.runOf(await s.delegate('capref', { op: 'complete' }), 'delegate')
      const keys = Object.keys(run.capability).sort().join(',')
      expect(keys === 'capability_id,version', `Run.capability has members ${keys}`)
      expect(run.capability.capability_id === CONFORMANCE_CAPABILITY.capability_id && run.capability.version === CONFORMANCE_CAPABILITY.version,
        `Run.capability ${JSON.stringify(run.capability)} is not the requested ref`)
      await s.waitType(run.run_id, 'run.completed')
      // nothing the target shows above the transport may say how the capability is reached (C1-NO-TRANSPORT):
      // this run as get_run reads it and its whole log, every run handle and event read so far, and the card's refs
      const read = await s.getRun(run.run_id)
      const events = await s.readEvents(run.run_id)
      const card = await s.n.bystander.getCard(s.kit.target, { fresh: true, signal: AbortSignal.timeout(KIT_WAIT_TIMEOUT_MS) })
      const bad: string[] = []
      const scan = (where: string, v: unknown, ref = false): void => { for (const why of capabilityTransportIn(v, s.kit.targetAddrs, ref)) bad.push(`${where} ${why}`) }
      scan(`run ${run.run_id}`, run)
      scan(`get_run ${run.run_id}`, read)
      for (const e of events) scan(`${run.run_id.slice(-8)}#${String(e.seq)}`, e)
      // a capability ref is a name and nothing else: any endpoint data in one is how the capability is reached
      for (const h of s.kit.answers) if (h.run.run_id.startsWith(`${s.kit.target}:`)) scan(`Run.capability of ${h.run.run_id}`, h.run.capability, true)
      for (const { runId: id, event: e } of s.kit.eventsRead()) if (payloadOf(e).capability !== undefined) scan(`${id.slice(-8)}#${String(e.seq)} payload.capability`, payloadOf(e).capability, true)
      scan('the target\'s card capabilities', card.capabilities, true)
      for (const b of [...new Set(bad)].slice(0, 8)) s.evidence.events.push(b)
      expect(bad.length === 0, `how the capability is reached shows above the transport in ${new Set(bad).size} place(s): ${[...new Set(bad)].slice(0, 4).join('; ')}`)
    }
  },
  {
    id: 'handler-fail',
    title: 'a run whose agent fails after creation ends failed with a run.failed event',
    run: async (s) => {
      const run = s.runOf(await s.delegate('fail', { op: 'fail', message: 'conformance: fail as asked' }), 'delegate')
      const failed = await s.waitType(run.run_id, 'run.failed')
      s.note(`run.failed payload ${JSON.stringify(payloadOf(failed))}`)
      const read = await s.getRun(run.run_id)
      expect(read.state === 'failed', `get_run: ${read.state}, not failed`)
    }
  },
  {
    id: 'handle-undelivered',
    title: 'a stalled caller: the run is created only after the caller\'s request is gone; the run ends with run.failed',
    run: async (s) => {
      const task = s.kit.task('undelivered')
      let frame
      try {
        frame = await s.delegate('undelivered', { op: 'stall-accept' }, { opts: { timeoutMs: STALLED_CALLER_PATIENCE_MS } })
      } catch (err) {
        if (!(err instanceof WireFailure)) throw err
        s.note(`the kit gave up on the delegation: ${err.message}`)
      }
      if (frame?.ok === true) fail('the target delivered a handle although its agent only accepted after the request was gone')
      const deadline = Date.now() + KIT_WAIT_TIMEOUT_MS
      for (;;) {
        const events = await s.readCorrelation(task)
        const failed = events.find(e => e.type === 'run.failed')
        if (failed !== undefined) {
          s.cite(String(failed.run_id), events)
          expect(events.some(e => e.type === 'run.started' && e.run_id === failed.run_id), 'run.failed without run.started')
          s.note(`failure ${JSON.stringify(payloadOf(failed).failure ?? null)}`)
          return
        }
        if (Date.now() > deadline) {
          // AAP-DELEGATE-FAILED-EVENT binds a delegation that fails after its run is created: with no run there is nothing to judge
          if (events.length === 0) throw new Undecided(`no run was created for the late-accepted delegation within ${KIT_WAIT_TIMEOUT_MS} ms: nothing failed after a run was created, so the check cannot decide`)
          fail(`the run created for a gone caller did not fail: ${events.map(e => String(e.type)).join(', ')}`)
        }
        await new Promise(resolve => setTimeout(resolve, KIT_POLL_INTERVAL_MS))
        s.live()
      }
    }
  },
  {
    id: 'unsupported-capability',
    title: 'delegations of a capability the card lacks, or of another version, get CAPABILITY_NOT_SUPPORTED and create no run',
    run: async (s) => {
      s.expectError(await s.delegate('nocap', { op: 'complete' }, { capability: UNSUPPORTED }), 'CAPABILITY_NOT_SUPPORTED', 'unknown capability')
      s.expectError(await s.delegate('nocap-version', { op: 'complete' }, { capability: { ...CONFORMANCE_CAPABILITY, version: '9.9.9' } }), 'CAPABILITY_NOT_SUPPORTED', 'other version')
      for (const name of ['nocap', 'nocap-version']) await s.expectNoRun(s.kit.task(name), `the delegation ${name}`)
    }
  },
  {
    id: 'refusal',
    title: 'a delegation the agent refuses gets DELEGATION_REFUSED and creates no run',
    run: async (s) => {
      s.expectError(await s.delegate('refuse', { op: 'refuse' }), 'DELEGATION_REFUSED', 'refused delegation')
      await s.expectNoRun(s.kit.task('refuse'), 'the refused delegation')
    }
  },
  {
    id: 'wrong-to-agent',
    title: 'a delegation whose to_agent is another agent, or an agent that does not exist, gets AGENT_NOT_FOUND from the target and creates no run; a handoff to an agent that does not exist gets AGENT_NOT_FOUND and leaves the run as it was',
    run: async (s) => {
      s.expectError(await s.delegate('elsewhere', { op: 'complete' }, { toAgent: s.n.bystander.agentId }), 'AGENT_NOT_FOUND', 'to_agent names another agent')
      await s.expectNoRun(s.kit.task('elsewhere'), 'the delegation to another agent')
      // a well-formed agent id of a key nobody holds
      const nobody = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
      s.expectError(await s.delegate('nobody', { op: 'complete' }, { toAgent: nobody }), 'AGENT_NOT_FOUND', 'to_agent names an agent that does not exist')
      await s.expectNoRun(s.kit.task('nobody'), 'the delegation to an agent that does not exist')
      const run = await heldRun(s, 'handoff-nobody')
      const f = await s.control(s.n.delegator, 'handoff', { run_id: run.run_id, to_agent: nobody, context: {} }, { timeoutMs: HANDOFF_STALL_PATIENCE_MS })
      s.expectError(f, 'AGENT_NOT_FOUND', 'handoff to an agent that does not exist')
      const after = await s.getRun(run.run_id)
      expect(after.state === 'running' && after.handoff_to === null, `the run after the refused handoff: ${after.state}, handoff_to ${JSON.stringify(after.handoff_to)}`)
      await release(s, run.run_id)
    }
  },
  {
    id: 'unknown-run',
    title: 'get_run, resume, block, cancel and handoff of a run the target does not have get RUN_NOT_FOUND',
    run: async (s) => {
      const unknown = `${s.kit.target}:${'0'.repeat(24)}`
      const d = s.n.delegator
      s.expectError(await s.control(d, 'get_run', { run_id: unknown }), 'RUN_NOT_FOUND', 'get_run of an unknown run')
      s.expectError(await s.control(d, 'resume', { run_id: unknown, resolution: { decision: 'approve' } }), 'RUN_NOT_FOUND', 'resume of an unknown run')
      s.expectError(await s.control(d, 'block', { run_id: unknown, reason: 'r', checkpoint_id: 'cp-unknown' }), 'RUN_NOT_FOUND', 'block of an unknown run')
      s.expectError(await s.control(d, 'cancel', { run_id: unknown }), 'RUN_NOT_FOUND', 'cancel of an unknown run')
      // towards a real agent (the kit's receiver), so only the run can be what is wrong
      s.expectError(await s.control(d, 'handoff', { run_id: unknown, to_agent: s.n.receiver.agentId, context: {} }), 'RUN_NOT_FOUND', 'handoff of an unknown run')
      s.expectError(await s.control(d, 'get_run', { run_id: 'no-such-run' }), 'RUN_NOT_FOUND', 'get_run of a run id that names no executor')
    }
  },
  {
    id: 'states',
    title: 'runs are seen in each of the states running, blocked, completed and failed',
    run: async (s) => {
      const running = await heldRun(s, 'state-running')
      const { run: blocked } = await blockedRun(s, 'state-blocked', 'cp-states')
      const completed = s.runOf(await s.delegate('state-completed', { op: 'complete' }), 'delegate')
      const failed = s.runOf(await s.delegate('state-failed', { op: 'fail' }), 'delegate')
      await s.waitType(completed.run_id, 'run.completed')
      await s.waitType(failed.run_id, 'run.failed')
      const states = []
      for (const r of [running, blocked, completed, failed]) states.push((await s.getRun(r.run_id)).state)
      expect(states.join(',') === 'running,blocked,completed,failed', `states read back: ${states.join(',')}`)
      await release(s, running.run_id)
      await release(s, blocked.run_id)
    }
  },
  {
    id: 'subdelegate',
    title: 'a run that delegates a child to another agent: the child names its parent run and keeps the correlation',
    run: async (s) => {
      const task = s.kit.task('subdelegate')
      const parent = s.runOf(await s.delegate('subdelegate', { op: 'subdelegate', to: s.n.receiver.agentId }), 'delegate')
      const done: WireEvent = await s.waitType(parent.run_id, 'run.completed')
      const output = payloadOf(done).output as Record<string, unknown> | undefined
      const childId = typeof output?.child === 'string' ? output.child : fail(`the parent completed without naming its child: ${JSON.stringify(payloadOf(done))}`)
      s.kit.expected.set(childId, task)
      const child = await s.getRun(childId)
      expect(child.parent_run === parent.run_id, `child.parent_run ${String(child.parent_run)} != ${parent.run_id}`)
      expect(child.correlation_id === task, `child correlation ${child.correlation_id} != ${task}`)
      expect(child.delegator === s.kit.target, `child delegator ${child.delegator} is not the target`)
      const started = (await s.readEvents(childId)).find(e => e.type === 'run.started')
      expect(payloadOf(started ?? {}).parent_run === parent.run_id, 'the child\'s run.started does not record its parent run')
    }
  }
]


/** Half of a delegate frame: the length prefix promises more bytes than are ever sent. */
function halfFrame (body: unknown): Uint8Array {
  const whole = encodeFrame({ id: 1, type: 'delegate', body })
  return whole.subarray(0, Math.max(2, Math.floor(whole.byteLength / 2)))
}

export const STALLED_FRAME_CHECK: Check = {
  id: 'stalled-frame',
  title: 'a stalled caller: half a delegate frame, then nothing; the target answers an id: null INVALID_REQUEST and creates no run; a frame whose halves come KIT_SPLIT_FRAME_GAP_MS apart is taken',
  run: async (s) => {
    // a slow path is not a stalled caller: the rest of a started frame is waited for
    const split = await s.delegate('split-frame', { op: 'complete' }, { opts: { splitGapMs: KIT_SPLIT_FRAME_GAP_MS } })
    expect(split.ok, `a delegate frame written in two halves ${KIT_SPLIT_FRAME_GAP_MS} ms apart was refused: ${errorText(split)}`)
    const task = s.kit.task('half-frame')
    const body = { to_agent: s.kit.target, task_id: task, capability: CONFORMANCE_CAPABILITY, input: { op: 'complete' }, parent_run: null }
    const f = await s.call(s.n.delegator, DELEGATE_PROTOCOL, 'delegate', body, { bytes: halfFrame(body), timeoutMs: STALLED_CALLER_PATIENCE_MS })
    expect(!f.ok && f.id === null, `the answer to a stalled frame: ${JSON.stringify(f).slice(0, 300)}`)
    expect(f.error?.code === 'INVALID_REQUEST', `the stalled frame got ${String(f.error?.code)}, not INVALID_REQUEST`)
    await s.expectNoRun(task, 'the stalled frame')
  }
}
