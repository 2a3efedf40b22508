/**
 * An async iterator over `source` that holds something (a reader's claim on
 * what it reads) from the moment it is made until it ends: read to its end,
 * failed, or closed with `return` (as `Readable.from` does when its stream is
 * destroyed) or `throw`, even if it was never read from. A plain async generator
 * closed before its first read would skip its `finally`.
 */
export function heldIterator<T> (source: AsyncGenerator<T>, letGo: () => void): AsyncGenerator<T> {
  let held = true
  const end = (): void => {
    if (!held) return
    held = false
    letGo()
  }
  const iterator = (async function * () {
    try {
      yield * source
    } finally {
      end()
    }
  })()
  const close = iterator.return.bind(iterator)
  iterator.return = async (value) => {
    end()
    return await close(value)
  }
  // the same for throw (Readable.from's destroy with an error calls it before, or instead of, return)
  const fail = iterator.throw.bind(iterator)
  iterator.throw = async (err: unknown) => {
    end()
    return await fail(err)
  }
  return iterator
}
