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
