/**
 * The peers known to hold this node's provider record under one key
 * (announce.ts): each peer a provide reached, with when. A peer keeps the
 * record, and the card it pulled on it (held-cards.ts), until the record
 * expires, whether or not a later walk still finds it among the key's
 * closest; a card that says something new, or drops the key, sends its record
 * to these peers as well, so none of them goes on handing out the older card.
 *
 * A send that failed does not remove a peer (it may have been a busy moment,
 * and the peer still holds the earlier record): a peer leaves once its last
 * record is DHT_PROVIDER_VALIDITY_MS old, or as the oldest when more than
 * ANNOUNCE_HOLDERS_KEPT are known. Kept in memory only: after a restart the
 * first such walk reaches the walk's own peers alone.
 */
import type { PeerId } from '@libp2p/interface'
import { DHT_PROVIDER_VALIDITY_MS } from '../constants.ts'
import { ANNOUNCE_HOLDERS_KEPT } from './constants.ts'

export class KeyHolders {
  /** By peer id, oldest record first. */
  private readonly peers = new Map<string, { peer: PeerId, at: number }>()
  private readonly now: () => number
  private readonly max: number
  /** The card changed since the key's holders last got a record: the next provide of the key sends it to them too. */
  owed = false

  constructor (now: () => number = Date.now, max = ANNOUNCE_HOLDERS_KEPT) {
    this.now = now
    this.max = max
  }

  get size (): number { return this.peers.size }

  /** The peers whose record from this node may still be held, oldest record first. */
  list (): PeerId[] {
    this.expire()
    return [...this.peers.values()].map(h => h.peer)
  }

  /** `peers` took the key's record now. */
  took (peers: PeerId[]): void {
    const at = this.now()
    for (const peer of peers) {
      const id = peer.toString()
      this.peers.delete(id)
      this.peers.set(id, { peer, at })
    }
    this.expire()
    for (const id of this.peers.keys()) {
      if (this.peers.size <= this.max) break
      this.peers.delete(id)
    }
  }

  private expire (): void {
    const oldest = this.now() - DHT_PROVIDER_VALIDITY_MS
    for (const [id, h] of this.peers) {
      if (h.at > oldest) break
      this.peers.delete(id)
    }
  }
}
