/**
 * What a subscriber or a replay tells the events service about a
 * correlation (`participants`, `runs`): checked, then added to its track. A
 * run named this way is `told` (track.ts) while its caller is there, and
 * `untell` gives that back when the caller goes.
 */
import { EVENTS_MAX_PARTICIPANTS } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import { executorOfRun } from '../runlog/event.ts'
import type { Correlations } from './correlations.ts'
import type { Syncer } from './syncer.ts'
import type { CorrTrack, RunTrack } from './track.ts'

export interface Hints { participants: string[], runs: string[] }

/** The caller's hints, checked: at most EVENTS_MAX_PARTICIPANTS agent ids, and run ids that name their executor. */
export function checkHints (opts: { participants?: string[], runs?: string[] }): Hints {
  const participants = opts.participants ?? []
  const runs = opts.runs ?? []
  if (participants.length > EVENTS_MAX_PARTICIPANTS) throw new InvalidRequestError(`at most ${EVENTS_MAX_PARTICIPANTS} participants`)
  for (const p of participants) peerIdOfAgent(p)
  for (const r of runs) {
    if (executorOfRun(r) === '') throw new InvalidRequestError(`"${r.slice(0, 80)}" is not a run id`)
    peerIdOfAgent(executorOfRun(r))
  }
  return { participants, runs }
}

/** Participants to sync from, runs to fetch. Returns the runs told, for `untell` when the caller goes. */
export function addHints (correlations: Correlations, syncer: Syncer, t: CorrTrack, hints: Hints): RunTrack[] {
  for (const p of hints.participants) correlations.addParticipant(t, p)
  const told: RunTrack[] = []
  for (const r of new Set(hints.runs)) {
    const rt = correlations.newRunTrack(t, r, false)
    if (rt === undefined) continue
    rt.told++
    told.push(rt)
    syncer.fetch(t, rt)
  }
  return told
}

/** A subscription or replay that named these runs is gone. */
export function untell (told: RunTrack[]): void {
  for (const rt of told) rt.told--
  told.length = 0
}
