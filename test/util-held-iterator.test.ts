/**
 * heldIterator (src/util/held-iterator.ts) ends its hold exactly once
 * however the iterator ends: read through, failed, closed with return or
 * throw before or after its first read, or its Readable destroyed with or
 * without an error. Session 44's second review found throw() before the
 * first read (what Readable.from's destroy(err) calls) left the hold for good.
 */
import { Readable } from 'node:stream'
import { once } from 'node:events'
import { describe, expect, it } from 'vitest'
import { heldIterator } from '../src/util/held-iterator.ts'

function make (n = 3, failAt = -1): { it: AsyncGenerator<number>, ends: () => number } {
  let ends = 0
  async function * src (): AsyncGenerator<number> {
    for (let i = 0; i < n; i++) {
      if (i === failAt) throw new Error('boom')
            yield i
    }
  }
  return { it: heldIterator(src(), () => { ends++ }), ends: () => ends }
}

describe('heldIterator', () => {
  it('read to the end: once', async () => {
    const h = make()
    for await (const _ of h.it) { /* */ }
    expect(h.ends()).toBe(1)
  })
  it('throw mid-way: once', async () => {
    const h = make(3, 1)
    await expect((async () => { for await (const _ of h.it) { /* */ } })()).rejects.toThrow('boom')
    expect(h.ends()).toBe(1)
  })
  it('return() before start: once', async () => {
    const h = make()
    await h.it.return(undefined)
    await h.it.return(undefined)
    expect(h.ends()).toBe(1)
  })
  it('return() mid-way: once', async () => {
    const h = make()
    await h.it.next()
    await h.it.return(undefined)
    expect(h.ends()).toBe(1)
  })
  it('Readable.from(...).destroy() before any read: once', async () => {
    const h = make()
    const r = Readable.from(h.it, { objectMode: true })
    r.destroy()
    await once(r, 'close')
    expect(h.ends()).toBe(1)
  })
  it('Readable.from(...).destroy() mid-way: once', async () => {
    const h = make(5)
    const r = Readable.from(h.it, { objectMode: true })
    await once(r, 'readable')
    r.read()
    r.destroy()
    await once(r, 'close')
    expect(h.ends()).toBe(1)
  })
  it('Readable.from(...).destroy(err) before any read: once', async () => {
    const h = make()
    const r = Readable.from(h.it, { objectMode: true })
    r.on('error', () => {})
    const closed = new Promise<void>(resolve => { r.on('close', () => { resolve() }) })
    r.destroy(new Error('client gone'))
    await closed
    expect(h.ends()).toBe(1)
  })
  it('throw() before start, then return(): once', async () => {
    const h = make()
    await expect(h.it.throw(new Error('x'))).rejects.toThrow('x')
    expect(h.ends()).toBe(1)
    await h.it.return(undefined)
    expect(h.ends()).toBe(1)
  })
})
