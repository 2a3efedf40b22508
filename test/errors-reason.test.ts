/**
 * An error raised from something thrown below says what that was, even when it
 * has no message: a 200-node simulation reported a dial failure as
 * "agent … is unreachable on /aap/delegate/0.1.0: undefined".
 */
import { describe, expect, it } from 'vitest'
import { reasonOf } from '../src/errors.ts'

describe('reasonOf', () => {
  it('gives the message of an Error that has one', () => {
    expect(reasonOf(new Error('connection refused'))).toBe('connection refused')
  })

  it('names an Error without a message by its name and code', () => {
    class StreamResetError extends Error { override name = 'StreamResetError'; code = 'ERR_STREAM_RESET' }
    expect(reasonOf(new StreamResetError())).toBe('StreamResetError (ERR_STREAM_RESET) without a message')
  })

  it('says what a thrown non-Error is: an event, a string, nothing', () => {
    expect(reasonOf(new Event('close'))).toBe('Event of type close without a message')
    expect(reasonOf('refused')).toBe('refused')
    expect(reasonOf(undefined)).toBe('undefined')
    expect(reasonOf({ message: 42 })).toBe('Object without a message')
  })
})
