/**
 * The clause catalog: every MUST and SHOULD of the AAP 0.1.0-draft profile,
 * every rule of the four Loops inter-layer contracts, and the aap-mesh wire
 * rules the kit also holds a node to. Data only: each clause names the checks
 * (src/conformance/checks-*.ts) whose outcome decides it. A clause with no
 * check says why it cannot be observed on the wire.
 */

export type Level = 'MUST' | 'MUST NOT' | 'SHOULD'

export interface Clause {
  id: string
  /** Where the text comes from. */
  source: 'aap-profile-0.1.0-draft' | 'loops-inter-layer-contracts' | 'aap-mesh protocols/control.md' | 'aap-mesh protocols/README.md' | 'aap-mesh protocols/handoff.md' | 'aap-mesh protocols/lineage.md'
  section: string
  level: Level
  text: string
  /** Ids of the checks that decide this clause (all must pass). */
  checks: string[]
  /** For a clause no wire check can decide: why it is not applicable to the node under test. */
  notApplicable?: string
}

const P = 'aap-profile-0.1.0-draft' as const
const C = 'loops-inter-layer-contracts' as const
const M = 'aap-mesh protocols/control.md' as const
const W = 'aap-mesh protocols/README.md' as const
const H = 'aap-mesh protocols/handoff.md' as const
const L = 'aap-mesh protocols/lineage.md' as const

export const ERROR_CHECKS = ['wrong-to-agent', 'handoff-stalled-receiver', 'unsupported-capability', 'refusal', 'unknown-run', 'invalid-transitions', 'no-late-runs']

export const CLAUSES: readonly Clause[] = [
  // ---- profile: AgentCard, Run, Discovery ----------------------------------------------
  { id: 'AAP-CARD-DISCOVERABLE', source: P, section: 'AgentCard', level: 'MUST', text: 'AgentCard MUST be discoverable through agent.discover.', checks: ['discover'] },
  { id: 'AAP-CARD-ENDPOINT-HIDDEN', source: P, section: 'AgentCard', level: 'MUST NOT', text: 'endpoint is transport-specific and MUST NOT be exposed upward to HACP.', checks: ['no-endpoint-upward'] },
  { id: 'AAP-CARD-CAPREF', source: P, section: 'AgentCard', level: 'MUST', text: 'capabilities MUST use CAP CapabilityRef values.', checks: ['card-capref'] },
  { id: 'AAP-RUN-CORRELATION', source: P, section: 'Run', level: 'MUST', text: 'For HACP-originated work, Run.correlation_id MUST equal Task.id.', checks: ['delegate-correlation'] },
  { id: 'AAP-DISCOVER-SUPPORT', source: P, section: 'Discovery', level: 'MUST', text: 'A conforming L1 MUST support agent.discover.', checks: ['discover'] },
  {
    id: 'AAP-DISCOVER-TAGS', source: P, section: 'Primitives', level: 'MUST', text: 'discover finds agents by capability or tags: DiscoveryQuery.tags finds the agents whose cards carry them, and no agent whose card lacks them.', checks: ['discover-tags']
  },
  { id: 'AAP-DISCOVER-REACH', source: P, section: 'Discovery', level: 'MUST', text: 'Results MUST include enough endpoint data for the L1 runtime to reach the target agent.', checks: ['discover'] },
  {
    id: 'AAP-DISCOVER-HACP-NO-ENDPOINT', source: P, section: 'Discovery', level: 'MUST NOT', text: 'HACP callers MUST NOT depend on endpoint details.', checks: [],
    notApplicable: 'an obligation of the HACP caller, not of the node under test (what the node exposes upward is AAP-CARD-ENDPOINT-HIDDEN)'
  },
  // ---- profile: Delegation --------------------------------------------------------------
  { id: 'AAP-DELEGATE-ASYNC', source: P, section: 'Delegation', level: 'MUST', text: 'delegate MUST return a Run handle without waiting for completion.', checks: ['delegate-async'] },
  { id: 'AAP-DELEGATE-TASKID', source: P, section: 'Delegation', level: 'MUST', text: 'DelegateRequest.task_id MUST become Run.correlation_id.', checks: ['delegate-correlation'] },
  { id: 'AAP-DELEGATE-FAILED-EVENT', source: P, section: 'Delegation', level: 'MUST', text: 'If delegation fails after the run is created, the implementation MUST emit run.failed.', checks: ['handler-fail', 'handle-undelivered'] },
  { id: 'AAP-DELEGATE-CAPABILITY', source: P, section: 'Delegation', level: 'MUST', text: 'If the target agent does not support the requested capability, the implementation MUST return CAPABILITY_NOT_SUPPORTED.', checks: ['unsupported-capability'] },
  // ---- profile: Block and Resume ----------------------------------------------------------
  { id: 'AAP-BLOCK-CHECKPOINT', source: P, section: 'Block and Resume', level: 'MUST', text: 'block MUST include checkpoint_id.', checks: ['block-checkpoint'] },
  { id: 'AAP-BLOCK-NO-SELF-RESUME', source: P, section: 'Block and Resume', level: 'MUST NOT', text: 'A blocked run MUST NOT resume itself.', checks: ['self-resume'] },
  { id: 'AAP-RESUME-RESOLUTION', source: P, section: 'Block and Resume', level: 'MUST', text: 'resume MUST carry the HACP checkpoint resolution payload.', checks: ['resume-resolution'] },
  { id: 'AAP-INVALID-TRANSITION', source: P, section: 'Block and Resume', level: 'MUST', text: 'Invalid state transitions MUST return INVALID_TRANSITION.', checks: ['invalid-transitions'] },
  // ---- profile: Handoff -------------------------------------------------------------------
  { id: 'AAP-HANDOFF-NEW-RUN', source: P, section: 'Handoff', level: 'MUST', text: 'Handoff creates a new run for the receiving agent.', checks: ['handoff', 'handoff-receive'] },
  { id: 'AAP-HANDOFF-CORRELATION', source: P, section: 'Handoff', level: 'MUST', text: 'The new run MUST preserve the original correlation_id.', checks: ['handoff', 'handoff-receive'] },
  { id: 'AAP-HANDOFF-HISTORY', source: P, section: 'Handoff', level: 'SHOULD', text: 'The old run SHOULD remain available as read-only history.', checks: ['handoff-history'] },
  // ---- profile: Event Stream ----------------------------------------------------------------
  { id: 'AAP-EVENTS-EMIT', source: P, section: 'Event Stream', level: 'MUST', text: 'Conforming L1 implementations MUST emit run events.', checks: ['event-stream', 'run-logs'] },
  { id: 'AAP-EVENT-CORRELATION', source: P, section: 'Event Stream', level: 'MUST', text: 'Every event MUST include correlation_id.', checks: ['events-correlation'] },
  { id: 'AAP-EVENT-BLOCKED-CHECKPOINT', source: P, section: 'Event Stream', level: 'MUST', text: 'run.blocked MUST identify the HACP checkpoint when the block came from a checkpoint.', checks: ['block-checkpoint', 'checkpoint-raise'] },
  { id: 'AAP-EVENT-REPLAY', source: P, section: 'Event Stream', level: 'SHOULD', text: 'AAP events SHOULD be replayable for debugging and audit correlation.', checks: ['replay', 'replay-taken'] },
  // ---- profile: Errors (through "Use the defined error semantics") ------------------------
  { id: 'AAP-ERROR-AGENT_NOT_FOUND', source: P, section: 'Errors', level: 'MUST', text: 'AGENT_NOT_FOUND: target agent does not exist or is unavailable.', checks: ['wrong-to-agent', 'handoff-stalled-receiver'] },
  { id: 'AAP-ERROR-CAPABILITY_NOT_SUPPORTED', source: P, section: 'Errors', level: 'MUST', text: 'CAPABILITY_NOT_SUPPORTED: target agent does not declare the requested capability.', checks: ['unsupported-capability'] },
  { id: 'AAP-ERROR-DELEGATION_REFUSED', source: P, section: 'Errors', level: 'MUST', text: 'DELEGATION_REFUSED: target agent refused delegated work.', checks: ['refusal'] },
  { id: 'AAP-ERROR-RUN_NOT_FOUND', source: P, section: 'Errors', level: 'MUST', text: 'RUN_NOT_FOUND: run id is invalid.', checks: ['unknown-run'] },
  { id: 'AAP-ERROR-INVALID_TRANSITION', source: P, section: 'Errors', level: 'MUST', text: 'INVALID_TRANSITION: run state transition is invalid.', checks: ['invalid-transitions'] },
  // ---- profile: Inter-layer Contracts (AAP to HACP, AAP to CAP) -------------------------------
  { id: 'AAP-HACP-TASK-ASSIGN', source: P, section: 'Inter-layer Contracts: AAP to HACP', level: 'MUST', text: 'task.assign -> agent.delegate: TaskID MUST become Run.correlation_id.', checks: ['delegate-correlation'] },
  { id: 'AAP-HACP-CHECKPOINT-RAISE', source: P, section: 'Inter-layer Contracts: AAP to HACP', level: 'MUST', text: 'checkpoint.raise -> agent.block: checkpoint_id MUST be provided.', checks: ['checkpoint-raise', 'block-checkpoint'] },
  { id: 'AAP-HACP-CHECKPOINT-RESOLVE', source: P, section: 'Inter-layer Contracts: AAP to HACP', level: 'MUST', text: 'checkpoint.resolve -> agent.resume: Resolution MUST be passed through.', checks: ['resume-resolution'] },
  { id: 'AAP-HACP-OWNERSHIP-DELEGATE', source: P, section: 'Inter-layer Contracts: AAP to HACP', level: 'SHOULD', text: 'ownership.delegate -> agent.delegate: Parent run SHOULD remain traceable.', checks: ['subdelegate', 'subdelegation-accepted'] },
  { id: 'AAP-HACP-OWNERSHIP-TRANSFER', source: P, section: 'Inter-layer Contracts: AAP to HACP', level: 'MUST', text: 'ownership.transfer -> agent.handoff: Correlation MUST be preserved.', checks: ['handoff'] },
  { id: 'AAP-CAP-TRANSPORT', source: P, section: 'Inter-layer Contracts: AAP to CAP', level: 'MUST NOT', text: 'AAP calls capabilities through CAP CapabilityRef. It MUST NOT depend on the capability transport.', checks: ['capability-by-ref'] },
  // ---- profile: Conformance -----------------------------------------------------------------
  { id: 'AAP-CONF-PRIMITIVES', source: P, section: 'Conformance', level: 'MUST', text: 'Support agent.discover, agent.delegate, agent.block, agent.resume, and agent.handoff.', checks: ['discover', 'discover-tags', 'delegate-async', 'checkpoint-raise', 'resume-resolution', 'handoff'] },
  { id: 'AAP-CONF-STATES', source: P, section: 'Conformance', level: 'MUST', text: 'Maintain the run states running, blocked, completed, and failed.', checks: ['states'] },
  { id: 'AAP-CONF-CORRELATION', source: P, section: 'Conformance', level: 'MUST', text: 'Include correlation_id on every run and run event.', checks: ['runs-correlation', 'events-correlation'] },
  { id: 'AAP-CONF-TASKID', source: P, section: 'Conformance', level: 'MUST', text: 'Preserve HACP TaskID as Run.correlation_id.', checks: ['delegate-correlation', 'handoff'] },
  { id: 'AAP-CONF-EVENT-STREAM', source: P, section: 'Conformance', level: 'MUST', text: 'Emit the required event stream.', checks: ['event-stream', 'run-logs'] },
  { id: 'AAP-CONF-ERRORS', source: P, section: 'Conformance', level: 'MUST', text: 'Use the defined error semantics.', checks: ERROR_CHECKS },
  // ---- contract 1: CapabilityRef -----------------------------------------------------------
  { id: 'C1-CAPREF-ONLY', source: C, section: 'Contract 1: CapabilityRef', level: 'MUST', text: 'Upper layers reference capabilities only by (capability_id, version); AAP calls capabilities by reference.', checks: ['card-capref', 'capability-by-ref'] },
  {
    id: 'C1-CAP-OWNS-IDENTITY', source: C, section: 'Contract 1: CapabilityRef', level: 'MUST', text: 'CAP creates and owns the capability identity.', checks: [],
    notApplicable: 'a rule of the CAP layer (L0); the node under test only carries the references CAP made'
  },
  {
    id: 'C1-HACP-REFERENCES', source: C, section: 'Contract 1: CapabilityRef', level: 'MUST', text: 'HACP uses references in task constraints such as must_use_capabilities.', checks: [],
    notApplicable: 'a rule of HACP task constraints (L2), not of the node under test'
  },
  { id: 'C1-NO-TRANSPORT', source: C, section: 'Contract 1: CapabilityRef', level: 'MUST NOT', text: 'AAP and HACP MUST NOT know whether the capability is reached through MCP stdio, MCP SSE, HTTP, a local function, or a Skills runtime.', checks: ['capability-by-ref'] },
  // ---- contract 2: TaskID correlation ----------------------------------------------------------
  { id: 'C2-ASSIGN-DELEGATES', source: C, section: 'Contract 2: TaskID Correlation', level: 'MUST', text: 'task.assign calls agent.delegate (the kit, as the L2 side, assigns each task by delegating it).', checks: ['delegate-correlation'] },
  { id: 'C2-TASKID', source: C, section: 'Contract 2: TaskID Correlation', level: 'MUST', text: 'HACP Task.id MUST equal AAP Run.correlation_id; DelegateRequest.task_id becomes Run.correlation_id.', checks: ['delegate-correlation'] },
  { id: 'C2-EVENT-CORRELATION', source: C, section: 'Contract 2: TaskID Correlation', level: 'MUST', text: 'Every AAP event includes the same correlation_id.', checks: ['events-correlation'] },
  { id: 'C2-CHILD-CORRELATION', source: C, section: 'Contract 2: TaskID Correlation', level: 'MUST', text: 'Child delegations and handoffs preserve the original correlation unless a new HACP task is explicitly created.', checks: ['subdelegate', 'handoff'] },
  // ---- contract 3: Checkpoint-to-Block -----------------------------------------------------------
  { id: 'C3-RAISE-IDENTIFIES', source: C, section: 'Contract 3: Checkpoint-to-Block', level: 'MUST', text: 'checkpoint.raise MUST identify the affected task and corresponding run (checkpoint.raise MUST block the corresponding run).', checks: ['checkpoint-raise'] },
  { id: 'C3-BLOCK-CHECKPOINT', source: C, section: 'Contract 3: Checkpoint-to-Block', level: 'MUST', text: 'agent.block MUST carry checkpoint_id.', checks: ['block-checkpoint'] },
  { id: 'C3-NO-SELF-RESUME', source: C, section: 'Contract 3: Checkpoint-to-Block', level: 'MUST NOT', text: 'A blocked run MUST NOT resume itself.', checks: ['self-resume'] },
  { id: 'C3-RESOLVE-RESUMES', source: C, section: 'Contract 3: Checkpoint-to-Block', level: 'MUST', text: 'checkpoint.resolve MUST pass the human resolution to agent.resume (checkpoint.resolve MUST resume the run).', checks: ['resume-resolution', 'checkpoint-raise'] },
  { id: 'C3-AUDIT-ONE-TRANSITION', source: C, section: 'Contract 3: Checkpoint-to-Block', level: 'SHOULD', text: 'Resolution and resume SHOULD be auditable as one logical transition.', checks: ['resume-audit'] },
  // ---- contract 4: Ownership-to-Handoff ------------------------------------------------------------
  {
    id: 'C4-OWNERSHIP-RECORD', source: C, section: 'Contract 4: Ownership-to-Handoff', level: 'MUST', text: 'ownership.transfer changes the HACP assignee and appends an ownership chain record.', checks: [],
    notApplicable: 'HACP\'s own records (L2); what the node keeps of a transfer is checked by C4-HISTORY and AAP-EVENT-REPLAY'
  },
  { id: 'C4-HANDOFF', source: C, section: 'Contract 4: Ownership-to-Handoff', level: 'MUST', text: 'When the new assignee is another agent, the implementation MUST call AAP agent.handoff.', checks: ['handoff', 'handoff-receive'] },
  { id: 'C4-CORRELATION', source: C, section: 'Contract 4: Ownership-to-Handoff', level: 'MUST', text: 'The new run MUST keep the original correlation_id.', checks: ['handoff', 'handoff-receive'] },
  { id: 'C4-HISTORY', source: C, section: 'Contract 4: Ownership-to-Handoff', level: 'SHOULD', text: 'The old run SHOULD remain visible as read-only history.', checks: ['handoff-history'] },
  {
    id: 'C-DEPENDENCY-DOWNWARD', source: C, section: 'Dependency Direction', level: 'MUST NOT', text: 'CAP MUST NOT import or depend on AAP or HACP; AAP MUST NOT import or depend on HACP business semantics; HACP MUST NOT call concrete tools or skills directly.', checks: [],
    notApplicable: 'a rule on how an implementation is built, not observable on the wire'
  },
  // ---- aap-mesh wire rules ---------------------------------------------------------------------
  { id: 'MESH-CONTROL-AUTHORITY', source: M, section: 'Who may call what', level: 'MUST', text: 'block, resume, cancel and handoff from a peer that is neither the run\'s delegator nor authorized on that run (whatever it may do on other runs) are refused with UNAUTHORIZED and change nothing; get_run is open to any peer.', checks: ['stranger-control', 'unauthorized-control'] },
  { id: 'MESH-HANDOFF-LINEAGE', source: H, section: 'handoff: what the receiver checks (rule 3)', level: 'MUST', text: 'Only the executor of from_run (the agent its run id names, and from_run.agent_id says so) may create a run that continues it; anyone else gets UNAUTHORIZED and no run is created.', checks: ['forged-handoff', 'handoff-receive'] },
  { id: 'MESH-LINEAGE-TICKET', source: L, section: 'What an executor accepts', level: 'MUST', text: 'A delegation carries a ticket signed by its delegator for the run it creates; a delegate without one, or with one its sender did not issue, is refused with UNAUTHORIZED and creates nothing; the run\'s run.started carries the ticket.', checks: ['delegation-ticket'] },
  { id: 'MESH-LINEAGE-SUBDELEGATION', source: L, section: 'What an executor accepts', level: 'MUST', text: 'Only the executor of a run may delegate under it (parent_run); anyone else gets UNAUTHORIZED and no run is created.', checks: ['subdelegation-authority', 'subdelegation-accepted'] },
  { id: 'MESH-HANDOFF-AUTHORITY', source: L, section: 'Tickets', level: 'MUST', text: 'A handoff successor keeps the delegator and authorized agents the delegator signed for: its ticket is issued by the old run\'s executor and inherits from the delegation ticket; a receiver refuses (UNAUTHORIZED) a handoff that names another delegator or more authorized agents than that, and creates no run.', checks: ['handoff-authority', 'handoff-inheritance'] },
  { id: 'MESH-FRAME-STALL', source: W, section: 'Framing', level: 'MUST', text: 'A frame that has started must be complete within FRAME_COMPLETION_TIMEOUT_MS: a caller that stalls inside a frame gets an id: null INVALID_REQUEST error, and nothing of its request takes effect.', checks: ['stalled-frame'] },
  { id: 'MESH-CLIENT-INTEROP', source: W, section: 'Framing, pipelining and streams', level: 'MUST', text: 'A node\'s own AAP client (MeshNode delegate, block, resume, handoff, cancel, getRun) drives the node\'s runs over the wire: the protocols interoperate with their reference caller.', checks: ['client-interop'] }
]

/** Rules the kit does not check yet (listed in every report). */
export const PENDING_CLAUSES: string[] = [
  'lineage, third-party view: a bystander\'s replay admits only runs with a proven place (test/runs-lineage.test.ts covers it for aap-mesh; the kit would need to gossip forged runs)'
]
