/**
 * The one rule for a Host header on the node's loopback HTTP servers (the
 * view's routes of the API, the metrics port): it must name the server
 * itself, so a page whose own name was made to resolve to 127.0.0.1 (DNS
 * rebinding) is refused.
 */
import type { IncomingMessage } from 'node:http'
import { UI_LOOPBACK_HOSTS } from '../ui/constants.ts'
import { isLoopbackAddress } from '../util/bearer.ts'

/**
 * Whether `req` names the server it reached in its Host header: a loopback
 * name (UI_LOOPBACK_HOSTS), one of `names` (where the server was told to
 * listen), or the address the connection reached (an IP, so no rebinding),
 * with the server's port (or none, on port 80). A page whose own name was
 * made to resolve to 127.0.0.1 (DNS rebinding) sends its own name.
 */
export function hostIsOwn (req: IncomingMessage, names: Iterable<string> = []): boolean {
  const host = (req.headers.host ?? '').toLowerCase()
  const port = req.socket.localPort
  const own = new Set([...UI_LOOPBACK_HOSTS, ...[...names].map(n => n.toLowerCase())])
  const local = req.socket.localAddress
  if (local !== undefined) own.add(hostForUrl(local.startsWith('::ffff:') ? local.slice(7) : local))
  for (const name of own) {
    if (host === `${name}:${port}` || (port === 80 && host === name)) return true
  }
  return false
}

/** A host as it goes in a URL: an IPv6 address in brackets. */
export function hostForUrl (host: string): string {
  return host.includes(':') ? `[${host}]` : host
}

export { isLoopbackAddress }
