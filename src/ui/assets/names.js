// The names the node's view shows next to agent ids. Rebuilt from what the view
// shows now, never only added to: the map used to get one more entry for every
// agent the tab ever saw a name of, for as long as it stayed open (found by
// session 49's review).

/**
 * The names to show: this node's own (`self`, {agent_id, name} or null), those
 * of the last peers answer (`peers`) and the last discovery answer (`found`),
 * both lists of {agent_id, name} (name may be null); and, from `old` (a Map of
 * agent id to name), the names of the agents in `keep` (those of the runs on
 * show) that none of these name any more. So the map holds at most one entry
 * per agent of these lists, whatever the tab saw before.
 */
export function rebuildNames (old, { self, peers, found, keep }) {
  const names = new Map()
  for (const id of keep) {
    const name = old.get(id)
    if (name !== undefined) names.set(id, name)
  }
  for (const p of [...found, ...peers]) if (typeof p.name === 'string') names.set(p.agent_id, p.name)
  if (self !== null && typeof self.name === 'string') names.set(self.agent_id, self.name)
  return names
}
