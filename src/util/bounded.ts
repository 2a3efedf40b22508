/** Make room for one more entry in an insertion-ordered map or set: the oldest goes when `max` are held. */
export function makeRoom (m: Map<string, unknown> | Set<string>, max: number): void {
  if (m.size < max) return
  const oldest = m.keys().next()
  if (oldest.done !== true) m.delete(oldest.value)
}
