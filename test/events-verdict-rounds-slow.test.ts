/**
 * A follower's tail rounds kept only by a standing verdict (protocols/events.md,
 * "Tails"): past the quiet watch they go on while the executor's own events may
 * still replace the verdict, but their delay doubles up to
 * EVENTS_VERDICT_SYNC_MAX_MS rather than EVENTS_TAIL_SYNC_MAX_MS, and they stop
 * once the verdict is older than LIVENESS_NOTICE_MAX_AGE_MS. Before, such a
 * follower asked every participant every 30 s for a day.
 *
 * This is the syncer's schedule alone, on the test clock: the rounds are
 * timers of minutes to hours, and nothing in them reaches the network here
 * (the correlation names no participant, and its one run has ended).
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { EVENTS_TAIL_SYNC_MAX_MS, LIVENESS_NOTICE_MAX_AGE_MS } from '../src/constants.ts'
import { EVENTS_VERDICT_SYNC_MAX_MS } from '../src/events/constants.ts'
import type { SyncClient } from '../src/events/sync.ts'
import { Syncer } from '../src/events/syncer.ts'
import { newCorrTrack, newStats, type CorrTrack, type RunTrack } from '../src/events/track.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import { signEvent } from '../src/runlog/event.ts'
import { signVerdict } from '../src/runlog/verdict.ts'

const unreachable = new Proxy({}, { get: () => { throw new Error('the schedule under test asks no one') } }) as SyncClient

async function trackWithVerdict (): Promise<CorrTrack> {
  const dKey = await generateKeyPair('Ed25519')
  const xKey = await generateKeyPair('Ed25519')
  const started = await signEvent(xKey, {
    run_id: 'run-verdict-rounds', correlation_id: 'task-verdict-rounds', type: 'run.started', at: new Date().toISOString(),
    seq: 1, prev: null, executor: agentIdOf(xKey), payload: { input: {} }
  })
  const verdict = await signVerdict(dKey, agentIdOf(dKey), started, 'the executor could not be reached')
  const t = newCorrTrack('task-verdict-rounds')
  const rt: RunTrack = {
    run_id: started.run_id, executor: agentIdOf(xKey), local: false, interest: false, told: 0, head: verdict, headHash: undefined,
    headLoaded: true, state: 'failed', fetching: false, fetchAgain: false, lineage: 'admitted'
  }
  t.runs.set(rt.run_id, rt)
  // someone waits on the correlation (a replay holds it), and the quiet watch after its last live run is over
  t.holds = 1
  return t
}

describe('tail rounds kept by a standing verdict alone', () => {
  afterEach(() => { vi.useRealTimers() })

  it('slow to EVENTS_VERDICT_SYNC_MAX_MS, come back to the usual bound when watched, and stop when the verdict is old', async () => {
    const t = await trackWithVerdict()
    vi.useFakeTimers()
    const syncer = new Syncer(unreachable, { running: true, ingest: async () => [], runTrack: async () => undefined, settled: () => {} }, newStats(), silentLogger())
    syncer.refresh(t)
    const delays: number[] = []
    for (let i = 0; i < 16; i++) {
      expect(t.tailTimer).toBeDefined()
      vi.advanceTimersToNextTimer()
      delays.push(t.tailDelay)
    }
    // before: every delay past the sixth round stayed at EVENTS_TAIL_SYNC_MAX_MS
    expect(Math.max(...delays)).toBe(EVENTS_VERDICT_SYNC_MAX_MS)
    expect(delays.filter(d => d > EVENTS_TAIL_SYNC_MAX_MS).length).toBeGreaterThan(4)
    // a reason besides the verdict (a join opens a quiet watch): the usual bound holds again at once
    t.quietUntil = Date.now() + 60_000
    syncer.refresh(t)
    expect(t.tailDelay).toBe(EVENTS_TAIL_SYNC_MAX_MS)
    t.quietUntil = 0
    // once the verdict is older than its executor's notice lasts, nothing polls the ended task
    vi.setSystemTime(Date.parse(t.runs.get('run-verdict-rounds')?.head?.at ?? '') + LIVENESS_NOTICE_MAX_AGE_MS + 1)
    vi.advanceTimersToNextTimer()
    expect(t.tailTimer).toBeUndefined()
  })
})
