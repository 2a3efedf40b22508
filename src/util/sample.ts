/** `k` distinct items of `xs` (all of them when it has no more), picked with `random` (a partial Fisher-Yates shuffle). */
export function sample<T> (random: () => number, xs: readonly T[], k: number): T[] {
  const pool = [...xs]
  const n = Math.min(k, pool.length)
  for (let i = 0; i < n; i++) {
    const j = i + Math.floor(random() * (pool.length - i))
    const x = pool[j] as T
    pool[j] = pool[i] as T
    pool[i] = x
  }
  return pool.slice(0, n)
}

/**
 * `most` items of `xs` (all of them when it has no more; none for less than
 * one; a fraction rounds down), the ones whose rank
 * under `seed` is lowest, lowest first. The rank of an item is a keyed hash of
 * `idOf(item)`: each step of it is a bijection of the 32-bit state, so for a
 * seed nobody knew before, every item's rank is uniform whatever its id (an
 * id cannot be chosen to rank high). One seed ranks every list alike: an item
 * picked from a list is picked from any part of it that holds it, so holders
 * of much the same list pick much the same items. Not a MAC: a party that
 * learns the seed can then choose ids that rank high for it.
 */
export function seededPick<T> (seed: string, xs: readonly T[], most: number, idOf: (x: T) => string): T[] {
  const k = Math.floor(most)
  if (xs.length <= k) return [...xs]
  if (!(k >= 1)) return []
  const start = keyedHash(0x811c9dc5, seed)
  // the k lowest so far, lowest first: a list of k (an answer's 20) beats sorting every record a holder keeps
  const best: Array<Ranked<T>> = []
  for (const x of xs) {
    const id = idOf(x)
    const rank = keyedHash(start, id)
    if (best.length === k && !before(rank, id, best[k - 1] as Ranked<T>)) continue
    let i = best.length === k ? k - 1 : best.length
    while (i > 0 && before(rank, id, best[i - 1] as Ranked<T>)) {
      best[i] = best[i - 1] as Ranked<T>
      i--
    }
    best[i] = { x, id, rank }
  }
  return best.map(r => r.x)
}

interface Ranked<T> { x: T, id: string, rank: number }

/** Whether (rank, id) comes before `than`: the lower rank, and of equal ranks the lower id. */
function before (rank: number, id: string, than: { rank: number, id: string }): boolean {
  return rank < than.rank || (rank === than.rank && id < than.id)
}

/** The rank of `id` under `seed` that `seededPick` orders by (lower first; equal ranks by id). */
export function seededRank (seed: string, id: string): number {
  return keyedHash(keyedHash(0x811c9dc5, seed), id)
}

/** FNV-1a over the UTF-16 units of `text` from state `h`, then murmur3's 32-bit finalizer: an unsigned 32-bit number. */
function keyedHash (h: number, text: string): number {
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193)
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}
