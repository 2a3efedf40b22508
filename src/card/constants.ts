/**
 * Limits of discovery (src/card) added after src/constants.ts filled up; the
 * protocol specs name them like the others (test/wire-docs.test.ts reads this
 * file too).
 */
import { DHT_PROVIDERS_PER_ANSWER } from '../constants.ts'

/**
 * Providers one peer's DHT answers may name to a discover, all its answers
 * together (an honest node names at most DHT_PROVIDERS_PER_ANSWER per
 * answer); the rest are dropped and counted.
 */
export const DISCOVER_PROVIDERS_PER_PEER_MAX = DHT_PROVIDERS_PER_ANSWER
