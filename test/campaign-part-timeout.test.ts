import { describe, expect, it } from 'vitest'
import { withPartTimeout } from '../scripts/campaign/part-timeout.ts'

describe('a campaign part is bounded by its part timeout', () => {
  it('a part that never ends fails with an error naming the part and the timeout', async () => {
    const r = await withPartTimeout('stuck', 'a part whose wait never comes', async () => new Promise(() => {}), 200)
    expect(r.ran).toBe(true)
    expect(r.error).toMatch(/part "stuck" did not end within 200 ms/)
  })

  it('a part that ends in time gives its own result', async () => {
    const r = await withPartTimeout('quick', 't', async () => ({ name: 'quick', title: 't', built: true, ran: true, musts: [] }), 60_000)
    expect(r.error).toBeUndefined()
    expect(r.name).toBe('quick')
  })
})
