/**
 * The datastore keys of the run store (store.ts): the runs this node
 * executes, its records of the runs it delegated, its liveness verdicts and
 * their notices, idempotency records, and the marks of successors it has
 * still to record (adoptions.ts).
 */
import { Key } from 'interface-datastore'

export const runKey = (runId: string): Key => new Key(`/aap/runs/${encodeURIComponent(runId)}`)
export const outgoingKey = (runId: string): Key => new Key(`/aap/outgoing/${encodeURIComponent(runId)}`)
export const verdictKey = (runId: string): Key => new Key(`/aap/verdicts/${encodeURIComponent(runId)}`)
export const NOTICE_PREFIX = '/aap/verdict-notices'
export const noticeKey = (runId: string): Key => new Key(`${NOTICE_PREFIX}/${encodeURIComponent(runId)}`)
export const IDEM_PREFIX = '/aap/idem/'
export const idemKey = (delegator: string, key: string): Key => new Key(`${IDEM_PREFIX}${encodeURIComponent(delegator)}/${encodeURIComponent(key)}`)
export const ADOPTING_PREFIX = '/aap/adopting/'
/** The mark of successor `runId`, still to record here (adoptions.ts). */
export const adoptingKey = (runId: string): Key => new Key(`${ADOPTING_PREFIX}${encodeURIComponent(runId)}`)
