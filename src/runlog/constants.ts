/**
 * Limits of the run log that came after src/constants.ts was full.
 */

/**
 * Deepest nesting of an event's payload (the payload object is level 1).
 * Frames carry events a few levels down (a sync page: envelope, body, list,
 * event, then the payload at level 5), and every frame stays within
 * FRAME_JSON_MAX_DEPTH (128); an agent's own values (input, output,
 * resolution, progress) are held to PAYLOAD_MAX_DEPTH (64) where they come
 * in, one level under the payload. An event past it is neither signed nor
 * taken from a peer (INVALID_REQUEST, reason too_deep): one such event would
 * make every sync page that carries it, the other runs' events beside it
 * too, one no node can read.
 */
export const EVENT_PAYLOAD_MAX_DEPTH = 96

/**
 * Domain prefix of a resume grant (resume-grant.ts): what the agent that
 * resumes a run signs, so the resolution in the executor's resume event is
 * the resumer's own word for anyone who reads the log.
 */
export const RESUME_GRANT_SIGNING_DOMAIN = 'aap-mesh/resume/0.1.0\n'
