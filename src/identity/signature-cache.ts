/**
 * A node's cache of Ed25519 verifications: agents' public keys, imported
 * once, and signatures that verified. Used for every signed record a node
 * checks again and again: run events and tickets (src/runlog), and cards
 * (src/card: a holder's cards are not kept in the card cache, so each
 * discover at rest met the same cards again and checked each with Ed25519).
 */
import { createHash, verify as verifySignature, type KeyObject } from 'node:crypto'
import { EVENT_VERIFIED_CACHE_ENTRIES, EVENT_VERIFY_KEY_CACHE_ENTRIES } from '../constants.ts'
import { makeRoom } from '../util/bounded.ts'
import { agentPublicKeyObject } from './signing.ts'

/** What a signature cache did: signatures checked with Ed25519, met again (not checked), refused. */
export interface SignatureCacheStats { checked: number, hits: number, refused: number }

/**
 * Executor keys, imported once, and signatures that verified. Every node
 * verifies every event it is sent, and parsing the agent id plus importing
 * the key each time cost more than the Ed25519 check itself; the same event
 * met again (a sync that re-fetches what gossip brought, a tail sync that
 * pulls a whole correlation) is not checked again. Verified signatures are
 * kept by the SHA-256 of the signed bytes (which name the executor, whose
 * agent id is the key) and the signature itself; only successes are kept, so
 * a forged or mutated event is always checked. Both bounded; the oldest entry
 * goes first.
 *
 * A node that is given its own cache (`signatures` of the verify functions)
 * shares nothing with the other nodes of its process; callers that pass none
 * use the process's cache (`processSignatures`), shared by every node of the
 * process, so a node of a simulation may find another node's work done.
 */
export class SignatureCache {
  readonly stats: SignatureCacheStats = { checked: 0, hits: 0, refused: 0 }
  private readonly keys = new Map<string, KeyObject>()
  private readonly verified = new Set<string>()
  private readonly maxKeys: number
  private readonly maxVerified: number

  constructor (opts: { maxKeys?: number, maxVerified?: number } = {}) {
    this.maxKeys = opts.maxKeys ?? EVENT_VERIFY_KEY_CACHE_ENTRIES
    this.maxVerified = opts.maxVerified ?? EVENT_VERIFIED_CACHE_ENTRIES
  }

  /** Verified signatures held now. */
  get size (): number {
    return this.verified.size
  }

  private executorKey (agentId: string): KeyObject | undefined {
    let key = this.keys.get(agentId)
    if (key !== undefined) return key
    try {
      key = agentPublicKeyObject(agentId) ?? undefined
    } catch {
      return undefined
    }
    if (key === undefined) return undefined
    makeRoom(this.keys, this.maxKeys)
    this.keys.set(agentId, key)
    return key
  }

  /** See verifySignedBytes. */
  verify (agentId: string, signed: Uint8Array, signature: string): boolean {
    const c = this.lookup(agentId, signed, signature)
    if (typeof c === 'boolean') return c
    try {
      return verifySignature(null, signed, c.key, c.sig) ? this.remember(c.seen) : this.refuse()
    } catch {
      return this.refuse()
    }
  }

  /**
   * As `verify`, with the Ed25519 check on libuv's thread pool: the caller's
   * thread goes on meanwhile (an executor signs and looks up while the
   * delegator's ticket is checked). Never rejects.
   */
  async verifyAsync (agentId: string, signed: Uint8Array, signature: string): Promise<boolean> {
    const c = this.lookup(agentId, signed, signature)
    if (typeof c === 'boolean') return c
    return new Promise<boolean>((resolve) => {
      try {
        verifySignature(null, signed, c.key, c.sig, (err, ok) => { resolve(err === null && ok ? this.remember(c.seen) : this.refuse()) })
      } catch {
        resolve(this.refuse())
      }
    })
  }

  /** The verdict without Ed25519 (a refusal, or a signature met before), or what the check needs. */
  private lookup (agentId: string, signed: Uint8Array, signature: string): boolean | { key: KeyObject, sig: Buffer, seen: string } {
    const key = this.executorKey(agentId)
    if (key === undefined) return this.refuse()
    // the key names the agent and the signature's text too, so a cached verdict can never vouch for another
    // signer, nor for another text of the same signature (only the one text is ever remembered, below)
    const seen = `${agentId} ${createHash('sha256').update(signed).digest('base64')} ${signature}`
    if (this.verified.has(seen)) {
      this.stats.hits++
      return true
    }
    const sig = Buffer.from(signature, 'base64url')
    // only the one text of these bytes: base64url of 64 bytes leaves 4 bits of its last character unused (and
    // Buffer skips characters outside the alphabet), so other texts decode to the same valid signature and give
    // the same event another hash, which forks the run's chain for whoever places that copy first
    if (sig.byteLength !== 64 || sig.toString('base64url') !== signature) return this.refuse()
    this.stats.checked++
    return { key, sig, seen }
  }

  private remember (seen: string): true {
    makeRoom(this.verified, this.maxVerified)
    this.verified.add(seen)
    return true
  }

  private refuse (): false {
    this.stats.refused++
    return false
  }
}

/** The cache of callers that pass none: one per process, shared by all its nodes. */
export const processSignatures = new SignatureCache()
