/**
 * Resume grants. A resume reaches a run's log as its executor's own signed
 * event, whose payload says who resumed it (`by`) and with what resolution:
 * the executor's word alone, so a hostile executor could log a human's
 * approval nobody gave, in its delegator's name. The agent that resumes
 * signs what it answers (the run, the checkpoint it named or null, the
 * resolution) and the executor puts that signature in the event (`grant`),
 * where anyone holding the log checks it against `by`'s key.
 *
 * A resume without a grant is unattested (the resumer or the executor
 * predates grants, or the resolution left the event no room for one); one
 * whose grant does not hold is forged: the run could not have taken it, and
 * no holder folds it.
 */
import type { PrivateKey } from '@libp2p/interface'
import { sign, signingBytes } from '../identity/signing.ts'
import type { SignatureCache } from '../identity/signature-cache.ts'
import { CHECKPOINT_ID_MAX_CHARS, EVENT_PAYLOAD_MAX_BYTES } from '../constants.ts'
import { RESUME_GRANT_SIGNING_DOMAIN } from './constants.ts'
import { verifySignedBytes } from './event.ts'
import type { AgentEvent } from './types.ts'

/** What a resumer signs. `checkpoint_id` is the one its resume named, null when it named none. */
export interface GrantedResume {
  run_id: string
  checkpoint_id: string | null
  resolution: Record<string, unknown>
}

/** A grant as the resume event carries it: the checkpoint the resumer named (or null) and its signature. */
export interface ResumeGrant {
  checkpoint_id: string | null
  signature: string
}

export type GrantStanding = 'attested' | 'unattested' | 'forged'

/** Stand-ins of the widest values a resume event may carry where the resumer cannot know them. */
const WIDEST_CHECKPOINT = '\u0001'.repeat(CHECKPOINT_ID_MAX_CHARS)
const SIGNATURE_CHARS = 86

/**
 * Whether the executor's resume event can carry a grant for `resume`: with
 * it the event's payload stays within EVENT_PAYLOAD_MAX_BYTES whatever
 * checkpoint the resume resolves (the widest one, when it names none). A
 * resolution the bound takes without a grant but not with one is resumed
 * without (unattested) rather than refused.
 */
export function grantFits (resume: GrantedResume, by: string): boolean {
  const payload = {
    transition: 'resume',
    checkpoint_id: resume.checkpoint_id ?? WIDEST_CHECKPOINT,
    resolution: resume.resolution,
    by,
    grant: { checkpoint_id: resume.checkpoint_id, signature: 'A'.repeat(SIGNATURE_CHARS) }
  }
  return Buffer.byteLength(JSON.stringify(payload)) <= EVENT_PAYLOAD_MAX_BYTES
}

export async function signResumeGrant (key: PrivateKey, resume: GrantedResume): Promise<string> {
  return sign(key, RESUME_GRANT_SIGNING_DOMAIN, resume)
}

/** Whether `signature` is `by`'s over `resume`. Never throws. */
export function grantHolds (by: string, resume: GrantedResume, signature: string, signatures?: SignatureCache): boolean {
  return verifySignedBytes(by, signingBytes(RESUME_GRANT_SIGNING_DOMAIN, resume), signature, signatures)
}

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/**
 * The standing of a resume event's resolution (`e` is a run.progress with
 * transition resume): attested when its grant is `by`'s signature over the
 * run, the checkpoint the grant names (null, or the one the event resolves)
 * and the resolution; unattested without a grant; forged otherwise.
 */
export function grantStanding (e: AgentEvent, signatures?: SignatureCache): GrantStanding {
  const p = e.payload
  const grant = p.grant
  if (grant === undefined) return 'unattested'
  if (!isRecord(grant) || typeof grant.signature !== 'string' || typeof p.by !== 'string' || !isRecord(p.resolution)) return 'forged'
  const named = grant.checkpoint_id
  if (named !== null && (typeof named !== 'string' || named !== p.checkpoint_id)) return 'forged'
  return grantHolds(p.by, { run_id: e.run_id, checkpoint_id: named, resolution: p.resolution }, grant.signature, signatures) ? 'attested' : 'forged'
}
