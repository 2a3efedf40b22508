/**
 * An artifact's name is bounded by ARTIFACT_NAME_MAX_CHARS counted in code
 * points, as the FilePart schema's maxLength (Ajv) counts it. `put` counted
 * UTF-16 units against a bare 255: a name of 200 emoji (400 units) passed the
 * schema but `put` refused it. Found by session 56's artifact review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isFilePart } from '../src/artifacts/types.ts'
import { ARTIFACT_NAME_MAX_CHARS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startLoneNodes, stopAll } from './helpers.ts'

const EMOJI = '\u{1F4E6}'
const BYTES = new TextEncoder().encode('named')

describe('an artifact name', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode
  beforeAll(async () => {
    nodes = await startLoneNodes(1)
    A = nodes[0]!
  })
  afterAll(async () => { await stopAll(nodes) })

  it('of 200 emoji (400 UTF-16 units) is stored and named in a part the schema accepts', async () => {
    const name = EMOJI.repeat(200)
    expect(name.length).toBe(400)
    const part = await A.artifacts.put(BYTES, { media_type: 'text/plain', name })
    expect(part.name).toBe(name)
    expect(isFilePart(part)).toBe(true)
  })

  it(`of ${ARTIFACT_NAME_MAX_CHARS} emoji is stored; one more code point is refused with INVALID_REQUEST`, async () => {
    expect(ARTIFACT_NAME_MAX_CHARS).toBe(255)
    const most = await A.artifacts.put(BYTES, { media_type: 'text/plain', name: EMOJI.repeat(ARTIFACT_NAME_MAX_CHARS) })
    expect(isFilePart(most)).toBe(true)
    const tooLong = EMOJI.repeat(ARTIFACT_NAME_MAX_CHARS + 1)
    expect(isFilePart({ ...most, name: tooLong })).toBe(false)
    const err = await rejectsWith(A.artifacts.put(BYTES, { media_type: 'text/plain', name: tooLong }), 'INVALID_REQUEST')
    expect(err.details).toMatchObject({ reason: 'bad_name' })
    const ascii = await rejectsWith(A.artifacts.put(BYTES, { media_type: 'text/plain', name: 'a'.repeat(ARTIFACT_NAME_MAX_CHARS + 1) }), 'INVALID_REQUEST')
    expect(ascii.details).toMatchObject({ reason: 'bad_name' })
  })
})
