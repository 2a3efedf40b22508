/**
 * A node compiles its validators as it starts (src/schema/validate.ts
 * `compileSchemas`): Ajv compiles a definition on first use and holds the
 * event loop meanwhile, so without this the first requests of each kind a
 * node answered waited for their validator to be compiled.
 */
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { compileSchemas, schema, uncompiledSchemas } from '../src/schema/validate.ts'
import { startMesh, stopAll } from './helpers.ts'

describe('validators compiled at start', () => {
  let nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('leaves no validator to compile on first use once a node has started', async () => {
    // importing the node made its validators, none of them compiled yet
    expect(uncompiledSchemas()).toBeGreaterThan(10)
    nodes = await startMesh(1)
    expect(uncompiledSchemas()).toBe(0)
    expect(compileSchemas()).toBe(0)
  })

  it('compiles a validator made later on its first use, or on the next call', () => {
    const late = schema<unknown>('aap:common#/definitions/AgentId')
    // made after the node started: it waits for its first use or the next compileSchemas
    expect(uncompiledSchemas()).toBeLessThanOrEqual(1)
    expect(late('not an agent id')).toBe(false)
    expect(uncompiledSchemas()).toBe(0)
  })
})
