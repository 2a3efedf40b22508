/**
 * Runs the kit against one target: starts the kit's four ephemeral nodes
 * (delegator, L2 coordinator, handoff receiver, bystander auditor) on TCP
 * loopback, joins the target through its multiaddr (or finds it by agent id
 * through bootstrap peers), runs every check over the wire, and decides each
 * clause of the catalog from the checks it names.
 */
import type { PrivateKey, Stream } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { HANDOFF_PROTOCOL } from '../constants.ts'
import { createMeshNode, type MeshNode } from '../node.ts'
import type { Logger } from '../logger.ts'
import { installConformanceAgent } from './agent.ts'
import { CLAUSES, PENDING_CLAUSES, type Clause } from './clauses.ts'
import { BLOCK_CHECKS } from './checks-block.ts'
import { CLIENT_CHECK } from './checks-client.ts'
import type { Check } from './checks-common.ts'
import { DELEGATION_CHECKS, STALLED_FRAME_CHECK } from './checks-delegation.ts'
import { KIT_TAG, receiverTag } from './checks-discovery.ts'
import { LATE_CHECKS } from './checks-final.ts'
import { FINAL_CHECKS, FORGED_HANDOFF_CHECK, HANDOFF_CHECKS, REPLAY_TAKEN_CHECK } from './checks-handoff.ts'
import { LINEAGE_CHECKS } from './checks-lineage.ts'
import {
  CONFORMANCE_CAPABILITY, KIT_CHECK_TIMEOUT_MS, KIT_DIAL_TIMEOUT_MS, KIT_EVIDENCE_MAX_CHARS, KIT_MESSAGE_MAX_CHARS, KIT_STALLED_STREAMS_MAX,
  KIT_WAIT_TIMEOUT_MS
} from './constants.ts'
import { CheckFailure, clean, Kit, Undecided, type Evidence } from './kit.ts'

/** Run last, in this order, once every other check and its cleanup is done: they read back what the others left. */
const LAST_CHECKS: readonly Check[] = [...LATE_CHECKS, ...FINAL_CHECKS]
export const ALL_CHECKS: readonly Check[] = [...DELEGATION_CHECKS, STALLED_FRAME_CHECK, ...BLOCK_CHECKS, ...HANDOFF_CHECKS, FORGED_HANDOFF_CHECK, ...LINEAGE_CHECKS, REPLAY_TAKEN_CHECK, CLIENT_CHECK, ...LAST_CHECKS]
/** Checks that mostly wait on the target's own time limits: started first, run beside the others. */
const SLOW_CHECKS = new Set(['handle-undelivered', 'handoff-stalled-receiver', 'stalled-frame'])
const FINAL = new Set(LAST_CHECKS.map(c => c.id))

/** `inconclusive`: a check could not decide (the target refused a run for capacity); its clauses are not shown to pass. */
export type Status = 'pass' | 'fail' | 'inconclusive' | 'n/a'

export interface CheckResult {
  id: string
  title: string
  status: 'pass' | 'fail' | 'inconclusive'
  message: string | null
  evidence: Evidence
  ms: number
}

export interface ClauseResult extends Clause {
  status: Status
  failed_checks: string[]
}

export interface ConformanceReport {
  kit: string
  target: string
  target_address: string | null
  started_at: string
  finished_at: string
  command: string | null
  checks: CheckResult[]
  clauses: ClauseResult[]
  pending_clauses: string[]
  summary: {
    pass: number
    fail: number
    inconclusive: number
    not_applicable: number
    must_failed: string[]
    should_failed: string[]
    /** MUST clauses neither passed nor failed: the kit exits non-zero for these too. */
    must_inconclusive: string[]
  }
}

export interface KitOptions {
  /** A multiaddr of the target (with /p2p/<agent id>), or the target's agent id (then `bootstrap` is needed). */
  target: string
  bootstrap?: string[]
  /** The command line that ran the kit, recorded in the report. */
  command?: string
  /** Told after each check. */
  onCheck?: (r: CheckResult) => void
  log?: Logger
  /** Aborted (a Ctrl-C): the check under way stops, its runs are canceled, the kit's nodes stop, and the run rejects. */
  signal?: AbortSignal
}

/** The agent id in a `/p2p/<id>` multiaddr, if any. */
function peerOf (addr: string): string | undefined {
  return /\/p2p\/([1-9A-HJ-NP-Za-km-z]+)\/?$/.exec(addr)?.[1]
}

/** The target's addresses as the kit knows them: those it dialed, and those its peer store holds. */
async function targetAddrs (node: MeshNode, kit: Kit, log?: Logger): Promise<string[]> {
  const out = new Set<string>()
  for (const c of node.host.getConnections(kit.targetPeer)) out.add(c.remoteAddr.toString())
  try {
    for (const a of (await node.host.peerStore.get(kit.targetPeer)).addresses) out.add(a.multiaddr.toString())
  } catch (err) {
    log?.debug({ err: String(err) }, 'the target is not in the kit\'s peer store: only dialed addresses are compared')
  }
  return [...out]
}

/** The kit's four nodes, each with the key it was made with (the kit signs crafted handoffs as its receiver). */
async function startKitNodes (keys: PrivateKey[]): Promise<MeshNode[]> {
  const nodes: MeshNode[] = []
  try {
    for (let i = 0; i < 4; i++) {
      const privateKey = await generateKeyPair('Ed25519')
      keys.push(privateKey)
      const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, followDelegations: false, privateKey })
      nodes.push(n)
      await n.start()
    }
  } catch (err) {
    await Promise.allSettled(nodes.map(async n => n.stop()))
    throw err
  }
  return nodes
}

function cleanEvidence (ev: Evidence): Evidence {
  const each = (list: string[]): string[] => list.map(x => clean(x, KIT_EVIDENCE_MAX_CHARS))
  return { runs: each(ev.runs), events: each(ev.events), frames: each(ev.frames), notes: each(ev.notes) }
}

/**
 * Run one check within KIT_CHECK_TIMEOUT_MS, then cancel every run it created
 * that may still hold one of the target's slots, pass or fail. An Undecided
 * (a capacity refusal, a read the target answered with an error frame) makes
 * the check inconclusive. What reaches the report is cleaned
 * and cut: the target wrote much of it.
 */
async function runCheck (kit: Kit, check: Check, signal?: AbortSignal): Promise<CheckResult> {
  const scope = kit.scope(check.id)
  const t0 = Date.now()
  let message: string | null = null
  let status: CheckResult['status'] = 'pass'
  let timer: ReturnType<typeof setTimeout> | undefined
  let onAbort: (() => void) | undefined
  try {
    await Promise.race([
      check.run(scope),
      new Promise((_resolve, reject) => {
        // the check itself stops at its next request or wait, so it changes nothing the next checks read
        const stop = (why: Error): void => {
          scope.stop(why)
          reject(why)
        }
        timer = setTimeout(() => { stop(new Error(`check did not finish within ${KIT_CHECK_TIMEOUT_MS} ms`)) }, KIT_CHECK_TIMEOUT_MS)
        onAbort = () => { stop(new Error('the kit was interrupted')) }
        if (signal?.aborted === true) onAbort()
        else signal?.addEventListener('abort', onAbort, { once: true })
      })
    ])
  } catch (err) {
    const e = err as Error
    status = err instanceof Undecided ? 'inconclusive' : 'fail'
    message = `${e instanceof CheckFailure || e instanceof Undecided ? '' : `${e.name}: `}${e.message}`
  } finally {
    clearTimeout(timer)
    if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort)
    await scope.close()
  }
  return {
    id: check.id,
    title: check.title,
    status,
    message: message === null ? null : clean(message, KIT_MESSAGE_MAX_CHARS),
    evidence: cleanEvidence(scope.evidence),
    ms: Date.now() - t0
  }
}

/**
 * The stalled peer's handler: a stream is held unanswered, at most
 * KIT_STALLED_STREAMS_MAX at once (past that it is reset), and let go when
 * its opener closes it, so a target opening streams in a loop cannot grow
 * the kit's memory.
 */
export function holdStalled (stalled: Set<Stream>, stream: Stream): void {
  if (stalled.size >= KIT_STALLED_STREAMS_MAX) {
    stream.abort(new Error('the kit holds enough stalled streams'))
    return
  }
  stalled.add(stream)
  stream.addEventListener('close', () => { stalled.delete(stream) }, { once: true })
}

/**
 * A check that passed, but a run appeared later for a task it saw refused
 * (found by no-late-runs): it fails after all, with what was found. Told to
 * `onCheck` again.
 */
function lateFailed (kit: Kit, results: Map<string, CheckResult>): CheckResult[] {
  const out: CheckResult[] = []
  for (const [id, found] of kit.lateFailures) {
    const r = results.get(id)
    if (r === undefined || r.status === 'fail') continue
    const message = `found at the end of the kit run: ${found.join('; ')}`
    out.push({ ...r, status: 'fail', message: clean(message, KIT_MESSAGE_MAX_CHARS), evidence: { ...r.evidence, notes: [...r.evidence.notes, ...found.map(f => clean(f, KIT_EVIDENCE_MAX_CHARS))] } })
  }
  return out
}

export function decideClauses (checks: CheckResult[]): ClauseResult[] {
  const byId = new Map(checks.map(c => [c.id, c]))
  return CLAUSES.map(clause => {
    if (clause.checks.length === 0) return { ...clause, status: 'n/a' as const, failed_checks: [] }
    const results = clause.checks.map(id => byId.get(id))
    // a missing check fails its clauses; an inconclusive one leaves them undecided unless another failed
    const failed = clause.checks.filter((id, i) => results[i]?.status !== 'pass' && results[i]?.status !== 'inconclusive')
    const unsure = clause.checks.filter((id, i) => results[i]?.status === 'inconclusive')
    const status = failed.length > 0 ? 'fail' as const : unsure.length > 0 ? 'inconclusive' as const : 'pass' as const
    return { ...clause, status, failed_checks: [...failed, ...unsure] }
  })
}

export async function runConformance (opts: KitOptions): Promise<ConformanceReport> {
  const startedAt = new Date().toISOString()
  const keys: PrivateKey[] = []
  const nodes = await startKitNodes(keys)
  const [delegator, coordinator, receiver, bystander] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
  const stalled = new Set<Stream>()
  try {
    const isAddr = opts.target.startsWith('/')
    const joinAddrs = isAddr ? [opts.target] : (opts.bootstrap ?? [])
    if (joinAddrs.length === 0) throw new Error('a target given by agent id needs --bootstrap <multiaddr> to reach the mesh')
    for (const n of nodes) {
      const joined = await n.join(joinAddrs, AbortSignal.timeout(KIT_DIAL_TIMEOUT_MS))
      if (joined === 0) throw new Error(`the kit cannot reach ${joinAddrs.join(', ')}`)
    }
    let target = isAddr ? peerOf(opts.target) : opts.target
    if (target === undefined) {
      const conns = delegator.host.getConnections()
      if (conns.length !== 1) throw new Error('the target multiaddr has no /p2p/<agent id> and the kit cannot tell which peer it reached')
      target = conns[0]!.remotePeer.toString()
    }
    if (!isAddr) {
      // find the target through the mesh, then connect every kit node to it
      await delegator.getCard(target, { signal: AbortSignal.timeout(KIT_WAIT_TIMEOUT_MS) })
    }
    const kit = new Kit({ delegator, coordinator, receiver, bystander, ...(keys[2] === undefined ? {} : { receiverKey: keys[2] }), ...(keys[3] === undefined ? {} : { bystanderKey: keys[3] }) }, target)
    for (const n of nodes) await n.host.dial(kit.targetPeer, { signal: AbortSignal.timeout(KIT_DIAL_TIMEOUT_MS) })
    kit.targetAddrs = await targetAddrs(delegator, kit, opts.log)

    // the receiver runs the conformance agent; the bystander declares the capability but never answers a handoff
    installConformanceAgent(receiver, opts.log)
    // only the receiver carries a tag of this kit run: discover-tags finds it by that tag, and must not find the bystander
    await receiver.publishCard({ name: 'aap-conformance-receiver', description: 'conformance kit: handoff receiver', capabilities: [CONFORMANCE_CAPABILITY], tags: [KIT_TAG, receiverTag(kit)] })
    await bystander.publishCard({ name: 'aap-conformance-bystander', description: 'conformance kit: auditor and stalled peer', capabilities: [CONFORMANCE_CAPABILITY], tags: [KIT_TAG] })
    await bystander.host.unhandle(HANDOFF_PROTOCOL)
    await bystander.host.handle(HANDOFF_PROTOCOL, (stream) => { holdStalled(stalled, stream) })

    const results = new Map<string, CheckResult>()
    const record = (r: CheckResult): void => { results.set(r.id, r); opts.onCheck?.(r) }
    const interrupted = (): void => { if (opts.signal?.aborted === true) throw new Error('the conformance run was interrupted') }
    const slow = ALL_CHECKS.filter(c => SLOW_CHECKS.has(c.id)).map(async c => { record(await runCheck(kit, c, opts.signal)) })
    for (const c of ALL_CHECKS) {
      if (SLOW_CHECKS.has(c.id) || FINAL.has(c.id)) continue
      interrupted()
      record(await runCheck(kit, c, opts.signal))
    }
    await Promise.all(slow)
    for (const c of LAST_CHECKS) {
      interrupted()
      record(await runCheck(kit, c, opts.signal))
    }
    for (const r of lateFailed(kit, results)) record(r)
    interrupted()
    const checks = ALL_CHECKS.map(c => results.get(c.id)!)
    const clauses = decideClauses(checks)
    return {
      kit: 'aap-mesh conformance kit 0.1.0',
      target,
      target_address: isAddr ? opts.target : null,
      started_at: startedAt,
      finished_at: new Date().toISOString(),
      command: opts.command ?? null,
      checks,
      clauses,
      pending_clauses: [...PENDING_CLAUSES],
      summary: {
        pass: clauses.filter(c => c.status === 'pass').length,
        fail: clauses.filter(c => c.status === 'fail').length,
        inconclusive: clauses.filter(c => c.status === 'inconclusive').length,
        not_applicable: clauses.filter(c => c.status === 'n/a').length,
        must_failed: clauses.filter(c => c.status === 'fail' && c.level !== 'SHOULD').map(c => c.id),
        should_failed: clauses.filter(c => c.status === 'fail' && c.level === 'SHOULD').map(c => c.id),
        must_inconclusive: clauses.filter(c => c.status === 'inconclusive' && c.level !== 'SHOULD').map(c => c.id)
      }
    }
  } finally {
    for (const s of stalled) s.abort(new Error('conformance kit done'))
    const stops = await Promise.allSettled(nodes.map(async n => n.stop()))
    for (const r of stops) if (r.status === 'rejected') opts.log?.warn({ err: String(r.reason) }, 'a kit node did not stop cleanly')
  }
}
