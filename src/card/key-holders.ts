/**
 * The peers known to hold this node's provider record under one key
 * (announce.ts): each peer a provide reached, with when. A peer keeps the
 * record, and the card it pulled on it (held-cards.ts), until the record
 * expires, whether or not a later walk still finds it among the key's
 * closest; a card that says something new, or drops the key, sends its record
 * to these peers as well, so none of them goes on handing out the older card.
 *
 * When the card changes every holder is owed its record (`owe`), and stays
 * owed until a send to it succeeds, or ANNOUNCE_HOLDER_SENDS_MAX sends to it
 * failed (a peer that left would keep the key walked at every announcement):
 * a send that failed, or was cut by the announcement's end (not counted), is
 * tried again by the key's next walk. A peer is not forgotten for a failed
 * send, since it still holds the earlier record. A peer leaves
 * once its last record is DHT_PROVIDER_VALIDITY_MS old, or as the oldest when
 * more than ANNOUNCE_HOLDERS_KEPT are known. Kept in memory only: after a
 * restart the first such walk reaches the walk's own peers alone.
 */
import type { PeerId } from '@libp2p/interface'
import { DHT_PROVIDER_VALIDITY_MS } from '../constants.ts'
import { ANNOUNCE_HOLDER_SENDS_MAX, ANNOUNCE_HOLDERS_KEPT } from './constants.ts'

export class KeyHolders {
  /** By peer id, oldest record first. */
  private readonly peers = new Map<string, { peer: PeerId, at: number }>()
  /** Ids of the holders not yet sent the current card's record, and how many sends to each failed. */
  private readonly owedTo = new Map<string, number>()
  private readonly now: () => number
  private readonly max: number

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

  /** The card changed: every holder is owed its record. */
  owe (): void {
    this.expire()
    for (const id of this.peers.keys()) this.owedTo.set(id, 0)
  }

  /** The holders still owed the current card's record. */
  owed (): PeerId[] {
    return this.list().filter(p => this.owedTo.has(p.toString()))
  }

  /**
   * `peers` took the key's record now, the last of them the newest: a caller names the walk's own peers last, so
   * that past the bound the oldest earlier holders leave first.
   */
  took (peers: PeerId[]): void {
    const at = this.now()
    for (const peer of peers) {
      const id = peer.toString()
      this.peers.delete(id)
      this.peers.set(id, { peer, at })
      this.owedTo.delete(id)
    }
    this.expire()
    for (const id of this.peers.keys()) {
      if (this.peers.size <= this.max) break
      this.forget(id)
    }
  }

  /** Sends to `peers` failed (not cut): a holder owed the record stays owed until ANNOUNCE_HOLDER_SENDS_MAX of them. */
  missed (peers: PeerId[]): void {
    for (const peer of peers) {
      const id = peer.toString()
      const failed = this.owedTo.get(id)
      if (failed === undefined) continue
      if (failed + 1 >= ANNOUNCE_HOLDER_SENDS_MAX) this.owedTo.delete(id)
      else this.owedTo.set(id, failed + 1)
    }
  }

  private expire (): void {
    const oldest = this.now() - DHT_PROVIDER_VALIDITY_MS
    for (const [id, h] of this.peers) {
      if (h.at > oldest) break
      this.forget(id)
    }
  }

  private forget (id: string): void {
    this.peers.delete(id)
    this.owedTo.delete(id)
  }
}
