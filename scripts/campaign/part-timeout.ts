/**
 * One campaign part, bounded: a part that neither ends nor fails within its
 * time (a wait that never comes, a hung client) fails with an error that
 * says so, and the campaign goes on (main.ts).
 */
import type { PartResult } from './report.ts'

export async function withPartTimeout (name: string, title: string, run: () => Promise<PartResult>, timeoutMs: number): Promise<PartResult> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timedOut = new Promise<PartResult>(resolve => {
    timer = setTimeout(() => {
      resolve({ name, title, built: true, ran: true, seconds: timeoutMs / 1000, error: `part "${name}" did not end within ${timeoutMs} ms (its part timeout): a wait in it never came` })
    }, timeoutMs)
  })
  try {
    return await Promise.race([run(), timedOut])
  } finally {
    clearTimeout(timer)
  }
}
