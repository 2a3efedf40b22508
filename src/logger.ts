/**
 * Structured logs: one JSON object per line (pino) on stderr, so stdout stays
 * free for a command's own output. Levels: fatal, error, warn, info, debug,
 * trace, silent.
 */
import { destination, pino, stdTimeFunctions, type Logger } from 'pino'

export type { Logger }

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
export type LogLevel = typeof LOG_LEVELS[number]

export function isLogLevel (value: string): value is LogLevel {
  return (LOG_LEVELS as readonly string[]).includes(value)
}

/**
 * A logger writing synchronously to `fd` (stderr by default): a process that
 * exits right after its last line still prints it.
 */
export function createLogger (level: LogLevel = 'info', fd = 2): Logger {
  return pino({
    level,
    base: { pid: process.pid },
    timestamp: stdTimeFunctions.isoTime,
    // never log a bearer token, however a request object ends up in a line
    redact: { paths: ['req.headers.authorization', 'headers.authorization', 'token'], censor: '[redacted]' }
  }, destination({ fd, sync: true }))
}

/** A logger that drops everything (library use, tests). */
export function silentLogger (): Logger {
  return pino({ level: 'silent' })
}

/** Level of the process-wide logger that library code falls back on (no logger given). */
const FALLBACK_LEVEL_ENV = 'AAP_MESH_LOG_LEVEL'
let fallback: Logger | undefined

/**
 * The logger of one component (`runs`, `events`, `wire`, …): a child of the
 * node's logger, or, for code used as a library without one, of a
 * process-wide logger on stderr at $AAP_MESH_LOG_LEVEL (default `warn`, so
 * only what someone should look at is printed).
 */
export function componentLogger (parent: Logger | undefined, component: string): Logger {
  if (parent !== undefined) return parent.child({ component })
  if (fallback === undefined) {
    const env = process.env[FALLBACK_LEVEL_ENV] ?? 'warn'
    fallback = createLogger(isLogLevel(env) ? env : 'warn')
  }
  return fallback.child({ component })
}
