/**
 * Several async sources read at once, their items yielded as they come.
 *
 * A source's failure ends the merge with that error. When the consumer stops
 * early (or a source fails), the merge does not wait for the sources still
 * reading: each is asked to return in the background, and the caller's own
 * abort signal is what ends their work in flight (an async generator that
 * waits on the network only returns once that wait is over).
 */
export async function * mergeSources<T> (sources: ReadonlyArray<AsyncIterable<T>>): AsyncGenerator<T> {
  const iterators = sources.map(s => s[Symbol.asyncIterator]())
  type Step = { i: number, result: IteratorResult<T> } | { i: number, error: unknown }
  const reading = new Map<number, Promise<Step>>()
  const read = (i: number): void => {
    const it = iterators[i]
    if (it === undefined) return
    // settles, never rejects: a failure is a step of its own, so nothing is left unhandled
    reading.set(i, it.next().then(result => ({ i, result }), (error: unknown) => ({ i, error })))
  }
  for (let i = 0; i < iterators.length; i++) read(i)
  try {
    while (reading.size > 0) {
      const step = await Promise.race(reading.values())
      if ('error' in step) {
        reading.delete(step.i)
        throw step.error
      }
      if (step.result.done === true) {
        reading.delete(step.i)
        continue
      }
      read(step.i)
      yield step.result.value
    }
  } finally {
    for (const i of reading.keys()) {
      const it = iterators[i]
      // a source's own clean-up failing is not the consumer's concern; the source logs its errors
      it?.return?.(undefined).catch(() => undefined)
    }
  }
}
