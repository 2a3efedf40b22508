/**
 * How a command takes SIGINT and SIGTERM: the first one asks it to stop (a
 * node stops cleanly, a wait ends and says how); a second one ends it at once.
 * The same signal again within CLI_SIGNAL_REPEAT_WINDOW_MS of the first is
 * that one delivered twice, not a second one: a terminal's Ctrl-C and a
 * service manager signal the whole process group, and bin/aap-mesh.mjs passes
 * the signal on to the command as well.
 */
import { CLI_SIGNAL_REPEAT_WINDOW_MS } from './constants.ts'
import { EXIT_INTERRUPTED } from './remote.ts'

/**
 * Call `stop` on the first of `signals`; on a second (not the first one
 * delivered twice), call `forced` and exit with EXIT_INTERRUPTED. Returns the
 * release: after a signal came, its handlers stay for the rest of the window,
 * where Node's default would kill the command before it said anything.
 */
export function onInterrupt (stop: (signal: NodeJS.Signals) => void, signals: NodeJS.Signals[], forced?: (signal: NodeJS.Signals) => void): () => void {
  let first: { signal: NodeJS.Signals, at: number } | undefined
  const handler = (signal: NodeJS.Signals): void => {
    if (first === undefined) {
      first = { signal, at: Date.now() }
      stop(signal)
      return
    }
    if (signal === first.signal && Date.now() - first.at < CLI_SIGNAL_REPEAT_WINDOW_MS) return
    forced?.(signal)
    process.exit(EXIT_INTERRUPTED)
  }
  for (const s of signals) process.on(s, handler)
  return () => {
    const off = (): void => { for (const s of signals) process.off(s, handler) }
    if (first === undefined) {
      off()
      return
    }
    setTimeout(off, Math.max(0, first.at + CLI_SIGNAL_REPEAT_WINDOW_MS - Date.now())).unref()
  }
}
