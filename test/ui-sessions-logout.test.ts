/**
 * The view's sessions (src/ui/sessions.ts) are found by their secret: a
 * session that logged out took its secret's entry with it. Before, the entry
 * stayed, and with the table full the next login pushed out the oldest live
 * session's secret instead: that tab was answered 401 on every call while its
 * session was still live (found by session 60's review).
 */
import { describe, expect, it } from 'vitest'
import { UI_MAX_SESSIONS } from '../src/ui/constants.ts'
import { UiSessions } from '../src/ui/sessions.ts'

describe('a view session that logs out', () => {
  it('takes its secret with it, so the next login does not push out a live session\'s secret', () => {
    const s = new UiSessions()
    const logins = []
    for (let i = 0; i < UI_MAX_SESSIONS; i++) logins.push(s.redeem(s.issueCode().code)!)
    const first = logins[0]!
    const last = logins.at(-1)!
    // the newest tab logs out (nothing asks with its secret again)
    s.endKey(s.keyOfSecret(last.secret)!)
    // a new login: the session table has room, and so has the secrets' table
    const next = s.redeem(s.issueCode().code)!
    expect(s.check(first.session)).toBe(true)
    expect(s.keyOfSecret(first.secret)).toBeDefined()
    expect(s.keyOfSecret(next.secret)).toBeDefined()
    expect(s.keyOfSecret(last.secret)).toBeUndefined()
  })
})
