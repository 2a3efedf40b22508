/**
 * JSON text of a large value, built a slice at a time so that one answer
 * does not hold the event loop: a replay may carry up to REPLAY_MAX_BYTES of
 * events, and `JSON.stringify` of all of them in one go stopped the node for
 * about 0.6 s (20,000 events), while its peers waited for answers.
 *
 * The text is the same as `JSON.stringify(value)`: plain objects and arrays
 * are walked, every other value (strings, numbers, values with `toJSON`) is
 * left to `JSON.stringify`, and after about `bytesPerTurn` of text the walk
 * lets the event loop run once.
 */
import { setImmediate as nextTurn } from 'node:timers/promises'

function isPlainObject (v: object): boolean {
  const proto: unknown = Object.getPrototypeOf(v)
  return (proto === Object.prototype || proto === null) && typeof (v as { toJSON?: unknown }).toJSON !== 'function'
}

export async function jsonInTurns (value: unknown, bytesPerTurn: number, walkDepth = 3): Promise<string> {
  const parts: string[] = []
  let sinceTurn = 0
  const put = (text: string): void => {
    parts.push(text)
    sinceTurn += text.length
  }
  // containers down to walkDepth are walked (a replay's arrays of events); what lies deeper is one
  // JSON.stringify each (an event), and the loop gets its turn between them once enough text was made
  const walk = async (v: unknown, inArray: boolean, depth: number): Promise<void> => {
    if (depth >= walkDepth || typeof v !== 'object' || v === null || !(Array.isArray(v) || isPlainObject(v))) {
      const text = JSON.stringify(v) as string | undefined
      // what JSON.stringify leaves out of an object is null in an array (the caller skips object members)
      put(text ?? (inArray ? 'null' : ''))
      if (sinceTurn >= bytesPerTurn) {
        sinceTurn = 0
        await nextTurn()
      }
      return
    }
    if (Array.isArray(v)) {
      put('[')
      for (let i = 0; i < v.length; i++) {
        if (i > 0) put(',')
        await walk(v[i], true, depth + 1)
      }
      put(']')
      return
    }
    put('{')
    let first = true
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined || typeof x === 'function' || typeof x === 'symbol') continue
      put(`${first ? '' : ','}${JSON.stringify(k)}:`)
      first = false
      await walk(x, false, depth + 1)
    }
    put('}')
  }
  await walk(value, false, 0)
  return parts.join('')
}
