/** A small seeded PRNG (mulberry32) so simulation runs are reproducible. */
export function seeded (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** `k` distinct items of `xs` (all of them when it has fewer), picked with `random` (a partial Fisher-Yates shuffle). */
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
