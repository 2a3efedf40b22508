/**
 * The JSON Schemas in protocols/ state limits that src/constants.ts names.
 * The code checks both (the schema on every frame, the constant where it
 * measures), so the two must say the same: this test ties each schema limit
 * to its constant.
 */
import { describe, expect, it } from 'vitest'
import card from '../protocols/card.schema.json' with { type: 'json' }
import common from '../protocols/common.schema.json' with { type: 'json' }
import events from '../protocols/events.schema.json' with { type: 'json' }
import runs from '../protocols/runs.schema.json' with { type: 'json' }
import artifact from '../protocols/artifact.schema.json' with { type: 'json' }
import * as C from '../src/constants.ts'
import { CARD_HELD_SEED_MAX_CHARS, CARD_HELD_SEED_MIN_CHARS } from '../src/card/constants.ts'
import { PEER_RECORD_MAX_CHARS } from '../src/wire/network-constants.ts'

const schemas: Record<string, unknown> = { card, common, events, runs, artifact }

/** schema file / JSON pointer inside it / keyword -> the constant it must equal */
const LIMITS: Array<[string, string, string, number]> = [
  ['card', '/definitions/AgentCard/properties/name', 'maxLength', C.CARD_NAME_MAX_CHARS],
  ['card', '/definitions/AgentCard/properties/description', 'maxLength', C.CARD_DESCRIPTION_MAX_CHARS],
  ['card', '/definitions/AgentCard/properties/capabilities', 'maxItems', C.CARD_MAX_CAPABILITIES],
  ['card', '/definitions/AgentCard/properties/endpoint', 'maxLength', C.CARD_ENDPOINT_MAX_CHARS],
  ['card', '/definitions/AgentCard/properties/protocol', 'maxLength', C.CARD_PROTOCOL_NAME_MAX_CHARS],
  ['card', '/definitions/AgentCard/properties/tags', 'maxItems', C.CARD_MAX_TAGS],
  ['card', '/definitions/AgentCard/properties/seq', 'maximum', C.CARD_SEQ_MAX],
  ['card', '/definitions/AgentCardView/properties/name', 'maxLength', C.CARD_NAME_MAX_CHARS],
  ['card', '/definitions/AgentCardView/properties/description', 'maxLength', C.CARD_DESCRIPTION_MAX_CHARS],
  ['card', '/definitions/AgentCardView/properties/capabilities', 'maxItems', C.CARD_MAX_CAPABILITIES],
  ['card', '/definitions/AgentCardView/properties/endpoint', 'maxLength', C.CARD_ENDPOINT_MAX_CHARS],
  ['card', '/definitions/AgentCardView/properties/protocol', 'maxLength', C.CARD_PROTOCOL_NAME_MAX_CHARS],
  ['card', '/definitions/AgentCardView/properties/tags', 'maxItems', C.CARD_MAX_TAGS],
  ['card', '/definitions/AgentCardView/properties/seq', 'maximum', C.CARD_SEQ_MAX],
  ['card', '/definitions/DiscoveryQuery/properties/tags/anyOf/0', 'maxItems', C.DISCOVER_QUERY_MAX_TAGS],
  ['card', '/definitions/GetHeldCardsRequest/oneOf/0/properties/agents', 'maxItems', C.CARD_HELD_ASK_MAX],
  ['card', '/definitions/GetHeldCardsResponse/properties/cards', 'maxItems', C.CARD_HELD_ASK_MAX],
  ['card', '/definitions/GetHeldCardsRequest/oneOf/1/properties/seed', 'minLength', CARD_HELD_SEED_MIN_CHARS],
  ['card', '/definitions/GetHeldCardsRequest/oneOf/1/properties/seed', 'maxLength', CARD_HELD_SEED_MAX_CHARS],
  ['runs', '/definitions/ControlHandoffRequest/properties/to_record', 'maxLength', PEER_RECORD_MAX_CHARS],
  ['common', '/definitions/CapabilityRef/properties/capability_id', 'maxLength', C.CAPABILITY_ID_MAX_CHARS],
  ['common', '/definitions/CapabilityRef/properties/version', 'maxLength', C.CAPABILITY_VERSION_MAX_CHARS],
  ['common', '/definitions/Tag', 'maxLength', C.CARD_TAG_MAX_CHARS],
  ['common', '/definitions/RunId', 'maxLength', C.RUN_ID_MAX_CHARS],
  ['common', '/definitions/TaskId', 'maxLength', C.TASK_ID_MAX_CHARS],
  ['common', '/definitions/ErrorFrame/properties/message', 'maxLength', C.ERROR_MESSAGE_MAX_CHARS],
  ['common', '/definitions/TraceContext/properties/traceparent', 'maxLength', C.TRACEPARENT_MAX_CHARS],
  ['common', '/definitions/TraceContext/properties/tracestate', 'maxLength', C.TRACESTATE_MAX_CHARS],
  ['common', '/definitions/RequestEnvelope/properties/id', 'maximum', C.FRAME_ID_MAX],
  ['common', '/definitions/RequestEnvelope/properties/type', 'maxLength', C.FRAME_TYPE_MAX_CHARS],
  ['common', '/definitions/ResponseEnvelope/oneOf/0/properties/id', 'maximum', C.FRAME_ID_MAX],
  ['common', '/definitions/ResponseEnvelope/oneOf/1/properties/id/anyOf/0', 'maximum', C.FRAME_ID_MAX],
  ['runs', '/definitions/Object', 'maxProperties', C.JSON_OBJECT_MAX_KEYS],
  ['runs', '/definitions/Reason', 'maxLength', C.REASON_MAX_CHARS],
  ['runs', '/definitions/CheckpointId', 'maxLength', C.CHECKPOINT_ID_MAX_CHARS],
  ['runs', '/definitions/IdempotencyKey', 'maxLength', C.IDEMPOTENCY_KEY_MAX_CHARS],
  ['runs', '/definitions/Run/properties/authorized', 'maxItems', C.RUN_AUTHORIZED_MAX_AGENTS],
  ['runs', '/definitions/Run/properties/turn', 'maximum', C.CONTEXT_MAX_TURNS],
  ['runs', '/definitions/Run/properties/failure/anyOf/1/properties/message', 'maxLength', C.ERROR_MESSAGE_MAX_CHARS],
  ['runs', '/definitions/DelegateRequest/properties/authorized', 'maxItems', C.RUN_AUTHORIZED_MAX_AGENTS],
  ['runs', '/definitions/HandoffRequest/properties/authorized', 'maxItems', C.RUN_AUTHORIZED_MAX_AGENTS],
  ['runs', '/definitions/RunTicket/properties/authorized', 'maxItems', C.RUN_AUTHORIZED_MAX_AGENTS],
  ['runs', '/definitions/RunTicket/properties/depth', 'maximum', C.MAX_HANDOFF_DEPTH],
  ['runs', '/definitions/RunTicket/properties/issued_at', 'maxLength', C.TIMESTAMP_MAX_CHARS],
  ['runs', '/definitions/RunTicket/properties/signature', 'maxLength', C.SIGNATURE_MAX_CHARS],
  // a ticket at the deepest handoff carries the tickets of every hop before it but the origin's
  ['runs', '/definitions/RunTicket/properties/chain', 'maxItems', C.MAX_HANDOFF_DEPTH - 1],
  ['runs', '/definitions/TicketLink/properties/issued_at', 'maxLength', C.TIMESTAMP_MAX_CHARS],
  ['runs', '/definitions/TicketLink/properties/signature', 'maxLength', C.SIGNATURE_MAX_CHARS],
  ['runs', '/definitions/OriginTicket/properties/authorized', 'maxItems', C.RUN_AUTHORIZED_MAX_AGENTS],
  ['runs', '/definitions/OriginTicket/properties/issued_at', 'maxLength', C.TIMESTAMP_MAX_CHARS],
  ['runs', '/definitions/OriginTicket/properties/signature', 'maxLength', C.SIGNATURE_MAX_CHARS],
  ['events', '/definitions/AgentEvent/properties/seq', 'maximum', C.EVENT_SEQ_MAX],
  ['events', '/definitions/SyncRunRequest/properties/after_seq', 'maximum', C.EVENT_SEQ_MAX],
  ['events', '/definitions/SyncRunRequest/properties/limit', 'maximum', C.SYNC_MAX_EVENTS_PER_RESPONSE],
  ['events', '/definitions/SyncCorrelationRequest/properties/after_seq', 'maximum', C.EVENT_SEQ_MAX],
  ['events', '/definitions/SyncCorrelationRequest/properties/limit', 'maximum', C.SYNC_MAX_EVENTS_PER_RESPONSE],
  ['events', '/definitions/SyncResponse/properties/events', 'maxItems', C.SYNC_MAX_EVENTS_PER_RESPONSE],
  ['artifact', '/definitions/ArtifactId', 'maxLength', C.ARTIFACT_ID_MAX_CHARS],
  ['artifact', '/definitions/ChunkId', 'maxLength', C.ARTIFACT_ID_MAX_CHARS],
  ['artifact', '/definitions/MediaType', 'maxLength', C.ARTIFACT_MEDIA_TYPE_MAX_CHARS],
  ['artifact', '/definitions/Manifest/properties/size', 'maximum', C.ARTIFACT_MAX_BYTES],
  ['artifact', '/definitions/Manifest/properties/chunk_bytes', 'maximum', C.ARTIFACT_CHUNK_BYTES],
  ['artifact', '/definitions/Manifest/properties/chunks', 'maxItems', C.ARTIFACT_MAX_CHUNKS],
  ['artifact', '/definitions/TextPart/properties/text', 'maxLength', C.PART_TEXT_MAX_CHARS],
  ['artifact', '/definitions/FilePart/properties/size', 'maximum', C.ARTIFACT_MAX_BYTES],
  ['artifact', '/definitions/FilePart/properties/name', 'maxLength', C.ARTIFACT_NAME_MAX_CHARS],
  ['artifact', '/definitions/Parts', 'maxItems', C.ARTIFACT_MAX_PARTS],
  ['artifact', '/definitions/ChunkRequest/properties/index', 'maximum', C.ARTIFACT_CHUNK_INDEX_MAX],
  ['artifact', '/definitions/ChunkResponse/properties/index', 'maximum', C.ARTIFACT_CHUNK_INDEX_MAX]
]

const BOUND_KEYWORDS = new Set(['maxLength', 'maxItems', 'maximum', 'maxProperties'])

function at (doc: unknown, pointer: string): unknown {
  let node = doc
  for (const part of pointer.split('/').slice(1)) {
    if (typeof node !== 'object' || node === null) return undefined
    node = (node as Record<string, unknown>)[part]
  }
  return node
}

/** Every numeric upper bound in a schema, as [pointer, keyword, value]. */
function bounds (node: unknown, pointer = ''): Array<[string, string, number]> {
  if (typeof node !== 'object' || node === null) return []
  const out: Array<[string, string, number]> = []
  for (const [k, v] of Object.entries(node)) {
    if (BOUND_KEYWORDS.has(k) && typeof v === 'number') out.push([pointer, k, v])
    else out.push(...bounds(v, `${pointer}/${k}`))
  }
  return out
}

describe('schema limits agree with src/constants.ts', () => {
  for (const [file, pointer, keyword, value] of LIMITS) {
    it(`${file}.schema.json ${pointer} ${keyword}`, () => {
      const node = at(schemas[file], pointer) as Record<string, unknown> | undefined
      expect(node?.[keyword], `${file}${pointer}`).toBe(value)
    })
  }

  it('every upper bound in the schemas is tied to a constant above', () => {
    const tied = new Set(LIMITS.map(([f, p, k]) => `${f}${p} ${k}`))
    const untied = Object.entries(schemas).flatMap(([file, doc]) =>
      bounds(doc).map(([p, k]) => `${file}${p} ${k}`)).filter(b => !tied.has(b))
    expect(untied).toEqual([])
  })
})
