/**
 * The logger libp2p and its modules write their debug lines to.
 *
 * libp2p's default (@libp2p/logger over weald) builds three `debug` instances
 * for every scope it opens, and it opens scopes per connection, per stream and
 * per request; each instance asks the terminal whether it takes colours
 * (`isatty`). With nothing enabled that is pure upkeep: in a 100-node
 * discovery benchmark it was 1.8 % of all CPU time. So unless `DEBUG` names
 * what to print (the way weald is told to), libp2p gets loggers that are off
 * and cost nothing to create. With `DEBUG` set it gets its own default, so
 * `DEBUG=libp2p:* npm start` prints what it always did.
 */
import type { ComponentLogger, Logger } from '@libp2p/interface'

function nothing (): void {}

const off: Logger = Object.assign(nothing.bind(null), {
  enabled: false,
  error: Object.assign(nothing.bind(null), { enabled: false }),
  trace: Object.assign(nothing.bind(null), { enabled: false }),
  newScope: (): Logger => off
})

/** Loggers that are off: one shared object, whatever the scope. */
export const quietLibp2pLogger: ComponentLogger = { forComponent: () => off }

/** `undefined` (libp2p's own logger) when `DEBUG` asks for output, otherwise loggers that are off. */
export function libp2pLogger (env: NodeJS.ProcessEnv = process.env): ComponentLogger | undefined {
  const debug = env.DEBUG
  return debug !== undefined && debug.trim() !== '' ? undefined : quietLibp2pLogger
}
