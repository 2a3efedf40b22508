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
