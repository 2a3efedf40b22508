/**
 * Small rules of placement.ts: which placed events are remembered for relay,
 * which relayed copies are passed on, and when the executor's own event
 * takes the place of its delegator's verdict.
 */
import { EVENTS_RELAY_WINDOW } from '../constants.ts'
import { canonicalEvent } from '../runlog/event.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { isVerdict } from '../runlog/verdict-shape.ts'
import type { CorrTrack, Verdict } from './track.ts'

/** Note `e` among the correlation's last EVENTS_RELAY_WINDOW placed events (see Placement.repeat). */
export function remember (t: CorrTrack, e: AgentEvent): void {
  const key = `${e.run_id}#${e.seq}`
  t.recent.delete(key)
  t.recent.set(key, e.signature)
  if (t.recent.size > EVENTS_RELAY_WINDOW) {
    const oldest = t.recent.keys().next()
    if (oldest.done !== true) t.recent.delete(oldest.value)
  }
}

/**
 * Relay an early or repeated event only in its canonical encoding (the one
 * every publisher sends, canonicalJson): message ids are the SHA-256 of the
 * bytes, so gossipsub's seen-cache stops the canonical copy after one pass,
 * while re-encoded copies (new ids each) would travel the whole mesh again.
 * Those are still judged here, and ignored.
 */
export function relayable (v: Verdict, text: string, event: AgentEvent): Verdict {
  if (v !== 'early' && v !== 'relayed') return v
  if (canonicalEvent(event) === text) return v
  return v === 'early' ? 'gap' : 'duplicate'
}

/** Whether `e`, at the seq of `held`, takes its place: held is a verdict, e the executor's own event after the same predecessor. */
export function supersedes (e: AgentEvent, held: AgentEvent): boolean {
  return isVerdict(held) && !isVerdict(e) && e.prev === held.prev
}
