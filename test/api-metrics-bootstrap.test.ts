/**
 * The bootstrap loop's counters are on the metrics page of a node that joined
 * through bootstrap peers (`aap_bootstrap`), and absent on one that did not.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { NodeMetrics } from '../src/api/metrics.ts'
import type { MeshNode } from '../src/node.ts'
import { BOOTSTRAP_CHURN_MIN_MS } from '../src/wire/network-constants.ts'
import { startLoneNodes, stopAll } from './helpers.ts'

describe('bootstrap metrics', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startLoneNodes(2) })
  afterAll(async () => { await stopAll(nodes) })

  it('shows the counters of a node that keeps joined, and nothing for one that does not', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    expect(await b.keepJoined(a.addresses)).toBe(1)
    const joined = new NodeMetrics()
    joined.attach(b)
    const text = await joined.text()
    joined.detach()
    expect(text).toMatch(/^aap_bootstrap\{what="failed_rounds"\} 0$/m)
    expect(text).toMatch(/^aap_bootstrap\{what="churn_redials"\} 0$/m)
    expect(text).toMatch(/^aap_bootstrap\{what="rejoined"\} 0$/m)
    expect(text).toMatch(/^aap_remembered_peers\{what="max"\} 16$/m)
    expect(text).toMatch(new RegExp(`^aap_bootstrap\\{what="churn_delay_ms"\\} ${BOOTSTRAP_CHURN_MIN_MS}$`, 'm'))
    const alone = new NodeMetrics()
    alone.attach(a)
    const other = await alone.text()
    alone.detach()
    expect(other).not.toMatch(/^aap_bootstrap\{/m)
  })
})
