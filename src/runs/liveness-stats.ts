/** What a node's liveness monitor (liveness.ts) did since start: the figures of GET /metrics. */
export interface LivenessStats {
  probes: number
  probeFailures: number
  /** Failed probes the executor answered (an error of its own, or a run this node refused): signs of life all the same. */
  probesAnsweredUnread: number
  /** Runs declared lost (a verdict signed, or the record failed when no event was held to chain one to). */
  declared: number
  /** Declared runs whose verdict could not be chained (no event of the run held here). */
  unchained: number
  /** Verdicts the executor took after it came back. */
  noticesDelivered: number
  /** Verdicts dropped unseen by their executor after LIVENESS_NOTICE_MAX_AGE_MS. */
  noticesExpired: number
  /** Verdicts dropped unseen because more notices were open than the bound (the oldest go first). */
  noticesDropped: number
  /** Rounds of offers, one per executor with open notices per probe interval (its notices in turn, until one is not reached). */
  noticeRounds: number
  /** Notices offered (a get_run or an executor_lost sent). */
  noticeOffers: number
  /** Verdicts replaced by the executor's own events at their seq. */
  superseded: number
  /** Runs about to be declared whose held log already ended: the record followed it instead. */
  endedUnseen: number
  /** Of those, ends whose output or failure broke the Run schema: kept without it (fold-checked.ts). */
  malformedEnds: number
  /** Runs declared lost because every probe of them was answered unread for LIVENESS_UNREAD_BOUND_FACTOR × lostAfterMs. */
  unreadDeclared: number
  /** Records ended because the executor answered with a run this node did not delegate, or of another lineage (`disown`). */
  disowned: number
  /** Records ended unchained, with no verdict, because the run held here names another delegator in its ticket. */
  notDelegated: number
}

export function newLivenessStats (): LivenessStats {
  return { probes: 0, probeFailures: 0, probesAnsweredUnread: 0, declared: 0, unchained: 0, noticesDelivered: 0, noticesExpired: 0, noticesDropped: 0, noticeRounds: 0, noticeOffers: 0, superseded: 0, endedUnseen: 0, malformedEnds: 0, unreadDeclared: 0, disowned: 0, notDelegated: 0 }
}
