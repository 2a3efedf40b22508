/**
 * Gossip topic names of correlated run events: one topic per correlation,
 * `/aap/events/0.1.0/<correlation_id>`. These two functions are the only
 * place a topic string is built or read.
 */
import { EVENTS_TOPIC_PREFIX } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { schema } from '../schema/validate.ts'

/** A correlation id is a HACP Task.id: aap:common#/definitions/TaskId. */
export const isCorrelationId = schema<string>('aap:common#/definitions/TaskId')

/** The gossip topic of a correlation. INVALID_REQUEST if the id is not a valid correlation id. */
export function correlationTopic (correlationId: string): string {
  if (!isCorrelationId(correlationId)) {
    throw new InvalidRequestError(`"${String(correlationId).slice(0, 80)}" is not a valid correlation id`, { reason: 'bad_correlation_id' })
  }
  return EVENTS_TOPIC_PREFIX + correlationId
}

/** The correlation id of an events topic, or undefined for any other topic. */
export function parseCorrelationTopic (topic: string): string | undefined {
  if (!topic.startsWith(EVENTS_TOPIC_PREFIX)) return undefined
  const id = topic.slice(EVENTS_TOPIC_PREFIX.length)
  return isCorrelationId(id) ? id : undefined
}
