/**
 * Guards error messages cut to ERROR_MESSAGE_MAX_CHARS (src/wire/framing.ts errorFrame, errorFromFrame): the
 * cut never falls between the two halves of a surrogate pair (protocols/README.md: aap-mesh never makes a lone
 * surrogate when it cuts a text to a bound). A plain slice did, found by a review.
 */
import { describe, expect, it } from 'vitest'
import { ERROR_MESSAGE_MAX_CHARS } from '../src/constants.ts'
import { InvalidRequestError } from '../src/errors.ts'
import { errorFrame, errorFromFrame } from '../src/wire/framing.ts'

describe('error messages cut to their bound', () => {
  // the bound falls between the two units of the emoji
  const message = 'a'.repeat(ERROR_MESSAGE_MAX_CHARS - 1) + '\u{1F600}tail'

  it('errorFrame cuts before a surrogate pair it cannot keep whole', () => {
    const cut = errorFrame(new InvalidRequestError(message)).message
    expect(cut.isWellFormed()).toBe(true)
    expect(cut).toBe('a'.repeat(ERROR_MESSAGE_MAX_CHARS - 1))
  })

  it('errorFromFrame cuts a peer\'s message the same way', () => {
    const cut = errorFromFrame({ code: 'INVALID_REQUEST', message }).message
    expect(cut.isWellFormed()).toBe(true)
    expect(cut).toBe('a'.repeat(ERROR_MESSAGE_MAX_CHARS - 1))
  })

  it('keeps a message within the bound as it is', () => {
    const short = 'ok \u{1F600}'
    expect(errorFrame(new InvalidRequestError(short)).message).toBe(short)
    expect(errorFromFrame({ code: 'INVALID_REQUEST', message: short }).message).toBe(short)
  })
})
