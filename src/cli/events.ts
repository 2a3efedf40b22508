/**
 * `aap-mesh events` (a correlation's run events, printed or followed live)
 * and `aap-mesh replay` (its whole lifecycle), and the checks of what their
 * streams and answers hold.
 */
import { InvalidArgumentError, type Command } from 'commander'
import { API_REPLAY_MAX_TIMEOUT_MS } from '../constants.ts'
import { streamFailure, type ApiClient, type SseEvent } from '../api/client.ts'
import type { CorrelationReplay } from '../events/replay.ts'
import { AGENT_EVENT_TYPES, type AgentEvent } from '../runlog/types.ts'
import { callShaped, shaped, type FieldKind } from './answers.ts'
import { eventLine, replayText } from './format.ts'
import { collect, EXIT_INTERRUPTED, EXIT_UNREACHABLE, idArg, remoteAction, remoteCommand, seg, stdoutGone, UnfinishedError, UsageError, watchStdout, writeOut, type RemoteOptions } from './remote.ts'
import { onInterrupt } from './signals.ts'

const REPLAY: Record<string, FieldKind> = { correlation_id: 'string', runs: 'array', events: 'array', transitions: 'array', forks: 'array', unreached: 'array' }

/** Option parser of a whole number of milliseconds (up to 9 digits). */
export function nonNegativeInt (value: string): number {
  if (!/^[0-9]{1,9}$/.test(value)) throw new InvalidArgumentError('a whole number of milliseconds')
  return Number(value)
}

/** A commander parser of a whole number of milliseconds from 0 to `max`. */
function msUpTo (max: number) {
  return (value: string): number => {
    const n = nonNegativeInt(value)
    if (n > max) throw new InvalidArgumentError(`a whole number of milliseconds from 0 to ${max}`)
    return n
  }
}

/** An event of a correlation's stream as the commands read it (the node's own is checked: not the API's is exit 3). */
export function runEvent (client: ApiClient, corr: string, ev: SseEvent): AgentEvent {
  return shaped<AgentEvent>(client, `the event stream of ${corr}`, ev.data, { run_id: 'string', type: 'string', payload: 'object' })
}

/** Option parser of --until: one of the run event types. */
function untilType (value: string): string {
  if (!(AGENT_EVENT_TYPES as readonly string[]).includes(value)) throw new InvalidArgumentError(`one of ${AGENT_EVENT_TYPES.join(', ')}`)
  return value
}

export function registerEvents (program: Command): void {
  remoteCommand(program, 'events', 'print a correlation\'s run events; with --follow keep printing them as they come')
    .argument('<correlation>', 'the correlation (task) id')
    .option('-f, --follow', 'stay connected and print new events until interrupted (exit 3 if the node ends the stream)', false)
    .option('--until <type>', `only with --follow (else a usage error, exit 2): stop after the first event of this type (${AGENT_EVENT_TYPES.join(', ')}); exit 3 if the stream ends before one, 130 if interrupted`, untilType)
    .option('--no-history', 'only with --follow (else a usage error, exit 2): only events from now on')
    .option('--participant <agent id>', 'an agent known to take part, repeatable', collect)
    .option('--owner <agent id>', 'whose task the correlation is (its root delegator): only its runs (protocols/lineage.md)')
    .action(remoteAction<RemoteOptions & { follow: boolean, until?: string, history: boolean, participant?: string[], owner?: string }>(async (client, opts, [correlation]) => {
      const corr = idArg(correlation, '<correlation>')
      // without --follow the events are printed once: nothing to wait for, no "from now on"
      if (!opts.follow && opts.until !== undefined) throw new UsageError('--until needs --follow (it stops a live feed at that event)')
      if (!opts.follow && !opts.history) throw new UsageError('--no-history needs --follow (it leaves out the events before the feed starts)')
      if (!opts.follow) {
        const r = await callShaped<CorrelationReplay>(client, 'GET', `/v1/events/${seg(corr)}/replay`, { events: 'array' }, undefined, { participant: opts.participant, owner: opts.owner })
        const events = r.events.map(e => runEvent(client, corr, { event: 'message', data: e }))
        return { json: { events }, text: events.length === 0 ? 'no events' : events.map(eventLine).join('\n') }
      }
      const ctl = new AbortController()
      const release = onInterrupt(() => { ctl.abort() }, ['SIGINT', 'SIGTERM'])
      // a reader gone away (| head -1) ends the follow as Ctrl-C does, quietly: it asked for no more;
      // output lost otherwise (a full disk) ends it too, and the stdout watch has said so and set exit 1
      const unwatch = watchStdout(() => { ctl.abort() })
      let seen = false
      try {
        for await (const ev of client.stream(`/v1/events/${seg(corr)}/stream`, { participant: opts.participant, owner: opts.owner, history: opts.history ? undefined : false }, { signal: ctl.signal })) {
          if (ev.event === 'ready') {
            if (!opts.json) process.stderr.write(`aap-mesh: following ${corr} (Ctrl-C to stop)\n`)
            continue
          }
          const failed = streamFailure(ev)
          if (failed !== undefined) throw new UnfinishedError(failed.code, `the node's event stream of ${corr} failed: ${failed.message}`, EXIT_UNREACHABLE)
          const e = runEvent(client, corr, ev)
          writeOut((opts.json ? JSON.stringify(e) : eventLine(e)) + '\n')
          if (opts.until !== undefined && e.type === opts.until) {
            seen = true
            break
          }
        }
      } catch (err) {
        // Ctrl-C before the node answered the stream ends the wait like one after it
        if (!ctl.signal.aborted) throw err
      } finally {
        release()
        unwatch()
      }
      // stdout failed: quiet for a reader gone away, else already reported with its exit status
      if (seen || stdoutGone()) return undefined
      if (ctl.signal.aborted) {
        // a plain follow ends by Ctrl-C as intended; a wait for an event did not get it
        if (opts.until === undefined) return undefined
        throw new UnfinishedError('INTERRUPTED', `stopped following ${corr} before a ${opts.until} event`, EXIT_INTERRUPTED)
      }
      if (opts.until !== undefined) throw new UnfinishedError('UNREACHABLE', `the node's event stream of ${corr} ended before a ${opts.until} event (did the node stop?)`, EXIT_UNREACHABLE)
      throw new UnfinishedError('UNREACHABLE', `the node's event stream of ${corr} ended (did the node stop?)`, EXIT_UNREACHABLE)
    }))
}

export function registerReplay (program: Command): void {
  remoteCommand(program, 'replay', 'the whole lifecycle of a correlation: every run and transition, in lineage order')
    .argument('<correlation>', 'the correlation (task) id')
    .option('--participant <agent id>', 'an agent known to take part, repeatable', collect)
    .option('--timeout-ms <ms>', `how long to collect from other agents (0-${API_REPLAY_MAX_TIMEOUT_MS})`, msUpTo(API_REPLAY_MAX_TIMEOUT_MS))
    .option('--owner <agent id>', 'whose task the correlation is (its root delegator): only its runs (protocols/lineage.md)')
    .action(remoteAction<RemoteOptions & { participant?: string[], timeoutMs?: number, owner?: string }>(async (client, opts, [correlation]) => {
      const r = await callShaped<CorrelationReplay>(client, 'GET', `/v1/events/${seg(idArg(correlation, '<correlation>'))}/replay`, REPLAY, undefined, { participant: opts.participant, owner: opts.owner, timeout_ms: opts.timeoutMs })
      return { json: r, text: replayText(r) }
    }))
}
