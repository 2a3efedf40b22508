/**
 * Canonical encoding and Ed25519 signatures for records that travel between
 * nodes (cards, events, delegation tickets). Each kind of record has its own
 * domain-separation prefix, so a signature over one kind never verifies as
 * another.
 */
import type { PrivateKey } from '@libp2p/interface'
import { fromString, toString } from 'uint8arrays'
import { publicKeyOfAgent } from './identity.ts'

/** JSON with object keys sorted at every level: the bytes every signer and verifier agree on. */
export function canonicalJson (value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError('non-finite number')
    return JSON.stringify(value)
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  const obj = value as Record<string, unknown>
  const keys = Object.keys(obj).filter(k => obj[k] !== undefined).sort()
  return `{${keys.map(k => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`
}

const enc = new TextEncoder()

export function signingBytes (domain: string, unsigned: unknown): Uint8Array {
  return enc.encode(domain + canonicalJson(unsigned))
}

export async function sign (key: PrivateKey, domain: string, unsigned: unknown): Promise<string> {
  const sig = await key.sign(signingBytes(domain, unsigned))
  return toString(sig, 'base64url')
}

/** True only when `signature` is `agentId`'s key signing `unsigned` under `domain`. Never throws. */
export async function verify (agentId: string, domain: string, unsigned: unknown, signature: string): Promise<boolean> {
  try {
    const key = publicKeyOfAgent(agentId)
    return await key.verify(signingBytes(domain, unsigned), fromString(signature, 'base64url'))
  } catch {
    return false
  }
}
