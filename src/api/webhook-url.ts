/**
 * A webhook URL the node can POST to. The document's pattern (WebhookUrl)
 * takes any http(s) text without blanks; fetch then refuses some of it at
 * every delivery (credentials in the URL are a TypeError, a port past 65535
 * does not parse, a port on the Fetch standard's blocking list is a 'bad
 * port' TypeError, nothing listens on port 0), and the item was retried and
 * given up on while the registration had answered 200. The same checks fetch
 * makes are made when the webhook is set: PUT /v1/card and `aap-mesh card
 * set --webhook` refuse it.
 */
import { InvalidRequestError } from '../errors.ts'
import { WEBHOOK_BAD_PORTS } from './constants.ts'

/** Why the node could not POST to `url`, or undefined when it can. */
export function webhookProblem (url: string): string | undefined {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch (err) {
    return `it does not parse as a URL (${(err as Error).message})`
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return `its scheme is ${parsed.protocol}, not http: or https:`
  if (parsed.username !== '' || parsed.password !== '') return 'it holds credentials (user:password@), which the node does not send; put a secret in the path or a query parameter instead'
  // parsed.port is '' for the scheme's default port (80, 443): never blocked
  if (parsed.port !== '') {
    const port = Number(parsed.port)
    if (port === 0) return 'its port is 0, which nothing listens on'
    if (WEBHOOK_BAD_PORTS.has(port)) return `its port ${port} is one fetch refuses to connect to (the Fetch standard's blocked ports)`
  }
  return undefined
}

/** The webhook as given, or INVALID_REQUEST (reason bad_webhook) naming why the node could not POST to it. */
export function checkWebhook (url: string): string {
  const problem = webhookProblem(url)
  if (problem !== undefined) throw new InvalidRequestError(`webhook ${JSON.stringify(url)} cannot be used: ${problem}`, { reason: 'bad_webhook' })
  return url
}
