// Loads of the node's view that events and timers ask for: one at a time, so a
// flood of a task's events never makes the tab send its node a flood of requests.

/**
 * `load` (an async function) run at most once at a time. `now()` runs it at
 * once; `soon()` after `delayMs`, once for a burst of asks, also while asks
 * keep coming (a timer restarted on each ask never fired while a run logged
 * faster than that). Asked while it runs, it does not start again alongside:
 * it runs once more, soon(), after it ends (found by session 49's review:
 * under a flood of a big task's events a new timeline GET started every
 * delay while the earlier ones were still being answered, and they piled up
 * in the browser and on the node). `report(err)` gets the failures of the
 * loads soon() starts; nothing starts while `stopped()` says so (the view is
 * locked).
 */
export function coalesced (load, { delayMs, report, stopped }) {
  let timer = null
  let running = null
  let again = false
  const now = () => {
    if (stopped()) return Promise.resolve()
    if (running !== null) {
      again = true
      return running
    }
    if (timer !== null) clearTimeout(timer)
    timer = null
    running = load().finally(() => {
      running = null
      if (again) {
        again = false
        soon()
      }
    })
    return running
  }
  const soon = () => {
    if (running !== null) again = true
    else if (timer === null) timer = setTimeout(() => { timer = null; now().catch(report) }, delayMs)
  }
  return { now, soon }
}
