/**
 * Which provider's card a discover fetches next. A provider this node holds a
 * connection to answers without a dial; one that needs a dial costs a TCP
 * connection, a Noise handshake and identify both ways, on both nodes. So the
 * connected go first, and a provider that needs a dial is asked only while
 * the fetches in flight are no more than the cards still wanted: one spare
 * fetch covers a slow or gone provider, instead of dials to every provider
 * named (protocols/card.md).
 */

/** The index in `pending` to fetch next, or -1 to wait for a fetch in flight to end. */
export function nextProvider<P> (pending: readonly P[], connected: (p: P) => boolean, inFlight: number, wanted: number): number {
  if (pending.length === 0) return -1
  const i = pending.findIndex(connected)
  if (i >= 0) return i
  return inFlight > wanted ? -1 : 0
}
