/**
 * The protocol specs in protocols/ name limits by their constants and give
 * the current values. This keeps the prose honest: every constant it names
 * exists, and every value it states is the constant's value.
 */
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import * as constants from '../src/constants.ts'
import * as networkConstants from '../src/wire/network-constants.ts'
import * as runsConstants from '../src/runs/constants.ts'
import * as cardConstants from '../src/card/constants.ts'
import * as a2aConstants from '../src/a2a/constants.ts'
import * as runlogConstants from '../src/runlog/constants.ts'
import * as artifactConstants from '../src/artifacts/constants.ts'
import * as mcpConstants from '../src/mcp/constants.ts'
import * as eventsConstants from '../src/events/constants.ts'
import * as storageConstants from '../src/storage/constants.ts'
import { AAP_ERROR_CODES, EXTENSION_ERROR_CODES } from '../src/errors.ts'
import { RUN_FAILURE_CODES } from '../src/runlog/types.ts'

const DOCS = ['README.md', 'card.md', 'delegate.md', 'control.md', 'handoff.md', 'errors.md', 'lineage.md', 'liveness.md', 'events.md', 'artifact.md', 'turns.md', 'a2a.md']
const UNIT: Record<string, number> = { KiB: 1024, MiB: 1024 * 1024, ms: 1, s: 1000, min: 60_000, h: 3_600_000 }
// the node's limits live in src/constants.ts, the transport's own in src/wire/network-constants.ts, the later
// ones of the run service and of discovery in src/runs/constants.ts and src/card/constants.ts, the A2A bridge's
// in src/a2a/constants.ts, the artifact store's in src/artifacts/constants.ts, the MCP server's in src/mcp/constants.ts, the events service's later ones in src/events/constants.ts (conformance.md is checked against the kit's own, test/conformance-docs.test.ts)
const values = { ...constants, ...networkConstants, ...runsConstants, ...cardConstants, ...a2aConstants, ...runlogConstants, ...artifactConstants, ...mcpConstants, ...eventsConstants, ...storageConstants } as unknown as Record<string, unknown>
const codes = new Set<string>([...AAP_ERROR_CODES, ...EXTENSION_ERROR_CODES, ...RUN_FAILURE_CODES, 'RUN_FAILURE_CODES'])
/** A2A v1.0's own enum values (Role, TaskState), which a2a.md names beside the bridge's limits, and the MCP server's own code. */
const a2aEnum = /^(?:ROLE_[A-Z]+|TASK_STATE_[A-Z_]+|REJECTED|UNREACHABLE)$/

describe('protocols/*.md agree with the constants files', () => {
  for (const doc of DOCS) {
    it(`${doc}: every constant it names exists, with the value it states`, () => {
      const text = readFileSync(new URL(`../protocols/${doc}`, import.meta.url), 'utf8')
      const named = [...text.matchAll(/`([A-Z][A-Z0-9_]{2,})`/g)].map(m => m[1] ?? '')
      expect(named.length).toBeGreaterThan(0)
      for (const name of named) {
        if (codes.has(name) || (doc === 'a2a.md' && a2aEnum.test(name))) continue
        expect(Object.hasOwn(values, name), `${doc} names ${name}`).toBe(true)
      }
      for (const m of text.matchAll(/`([A-Z][A-Z0-9_]{2,})` \((\d[\d,]*\d|\d)(?: (KiB|MiB|ms|s|min|h))?[,)]/g)) {
        const [, name = '', n = '', unit] = m
        expect(values[name], `${doc}: ${m[0]}`).toBe(Number(n.replaceAll(',', '')) * (unit === undefined ? 1 : UNIT[unit] ?? Number.NaN))
      }
    })
  }
})
