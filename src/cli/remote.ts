/**
 * What every command other than `start` shares: it talks to a running node
 * through the local agent API (URL and token from --data-dir, or --api-url
 * and --token), prints a result for people or, with --json, one JSON
 * document per line, and exits non-zero with a readable message on errors:
 *
 *   1  the node answered with an error (its AAP code is printed), or stdout
 *      failed other than by a closed pipe (OUTPUT_FAILED: a full disk)
 *   2  the command's own arguments are wrong (nothing was sent)
 *   3  no node could be reached (not running, wrong URL or data directory)
 *
 * A command that waits (send, events --follow --until) also exits 1 when what
 * it waited for did not happen (the run failed or blocked), 3 when the node's
 * stream ended first, and 130 when SIGINT or SIGTERM ended the wait.
 */
import { readFile } from 'node:fs/promises'
import { InvalidArgumentError, Option, type Command } from 'commander'
import { DEFAULT_DATA_DIR } from '../constants.ts'
import { ApiClient, ApiError, ApiUnreachableError } from '../api/client.ts'
import { AapError } from '../errors.ts'
import { printable, printableLines } from './printable.ts'

export const EXIT_REFUSED = 1
export const EXIT_USAGE = 2
export const EXIT_UNREACHABLE = 3
/** A wait ended by SIGINT or SIGTERM (128 + SIGINT, as shells report Ctrl-C). */
export const EXIT_INTERRUPTED = 130

export interface RemoteOptions {
  dataDir: string
  apiUrl?: string
  token?: string
  json: boolean
}

/** A wrong argument, found before anything was sent to the node. */
export class UsageError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'UsageError'
  }
}

/** A command ran but did not get what it waited for: the code and line for stderr, and the exit status. */
export class UnfinishedError extends Error {
  readonly code: string
  readonly exit: number

  constructor (code: string, message: string, exit: number) {
    super(message)
    this.name = 'UnfinishedError'
    this.code = code
    this.exit = exit
  }
}

/** The result of a command: a JSON value for --json, and lines for people. */
export interface Output {
  json: unknown
  text: string
  /** Printed like a result, but the command did not succeed: say why on stderr and exit with its status. */
  unfinished?: UnfinishedError
}

/** Option parser of repeatable options. */
/** A commander parser of an integer option from 1 to `max`. */
export function positiveInt (max: number) {
  return (value: string): number => {
    const n = Number(value)
    if (!/^[0-9]+$/.test(value) || n < 1 || n > max) throw new InvalidArgumentError(`an integer from 1 to ${max}`)
    return n
  }
}

export function collect (value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value]
}

/** Add the options every remote command takes. */
export function remoteCommand (parent: Command, name: string, description: string): Command {
  return parent.command(name)
    .description(description)
    .option('--data-dir <dir>', 'data directory of the running node (its api.json and api-token)', `./${DEFAULT_DATA_DIR}`)
    .addOption(new Option('--api-url <url>', 'URL of the node\'s API (instead of <data dir>/api.json)').env('AAP_MESH_API_URL'))
    .addOption(new Option('--token <token>', 'API token (instead of <data dir>/api-token)').env('AAP_MESH_TOKEN'))
    .option('--json', 'print JSON (one document per line) instead of text', false)
}

/**
 * The client of the node the options name. A URL and a token always come as
 * a pair from one place: the command line or environment (--api-url and
 * --token, AAP_MESH_API_URL and AAP_MESH_TOKEN), or the data directory. One
 * without the other is a usage error, never completed from the data
 * directory: its token would go to a URL it was not issued for. A --data-dir
 * given on the command line names the node, so the environment's URL and
 * token are left out then (`cmd` says where each value came from).
 */
export async function clientFor (opts: RemoteOptions, cmd?: Command): Promise<ApiClient> {
  let apiUrl = opts.apiUrl
  let token = opts.token
  if (cmd?.getOptionValueSource('dataDir') === 'cli') {
    const fromEnv: string[] = []
    if (cmd.getOptionValueSource('apiUrl') === 'env') {
      apiUrl = undefined
      fromEnv.push('AAP_MESH_API_URL')
    }
    if (cmd.getOptionValueSource('token') === 'env') {
      token = undefined
      fromEnv.push('AAP_MESH_TOKEN')
    }
    if (fromEnv.length > 0) process.stderr.write(`aap-mesh: --data-dir ${opts.dataDir} given: ${fromEnv.join(' and ')} from the environment left out\n`)
  }
  if (apiUrl === undefined && token === undefined) return ApiClient.fromDataDir(opts.dataDir)
  if (apiUrl === undefined || token === undefined) throw new UsageError('--api-url and --token go together (or leave both to the data directory)')
  checkApiUrl(apiUrl)
  // a header cannot carry it: the request would fail before it left, and be told as an unreachable node
  if (/[^\t\x20-\x7e\x80-\xff]/.test(token)) throw new UsageError('--token holds a line break, a control or a character past Latin-1: no API token does (check how it was copied)')
  return new ApiClient(apiUrl, token)
}

/** An --api-url that is an http or https URL (else the request fails as if no node answered). */
function checkApiUrl (apiUrl: string): void {
  let url: URL
  try {
    url = new URL(apiUrl)
  } catch {
    throw new UsageError(`--api-url ${printable(apiUrl)} is not a URL (e.g. http://127.0.0.1:7700)`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`--api-url ${printable(apiUrl)} is not an http or https URL (e.g. http://127.0.0.1:7700)`)
}

/** A positional id the command sends in a path: an empty one names nothing (and would be another request). */
export function idArg (value: string | undefined, what: string): string {
  if (value === undefined || value === '') throw new UsageError(`${what} must not be empty`)
  return value
}

/**
 * Failures of stdout, counted (and the last kept) for diagnosis. A closed
 * pipe means its reader went away (`aap-mesh events --follow | head -1`): the
 * command prints nothing more and ends quietly, as programs do on a closed
 * pipe. Any other failure (a full disk: ENOSPC, EIO) lost output someone
 * wanted: it is said on stderr and the command exits EXIT_REFUSED (1).
 */
export const stdoutFailures: { count: number, lost: number, last: unknown } = { count: 0, lost: 0, last: undefined }
const stdoutGoneListeners = new Set<() => void>()
let stdoutWatched = false

/** True once stdout failed (its reader went away, or its output is lost): nothing more is written. */
export function stdoutGone (): boolean {
  return stdoutFailures.count > 0
}

/** Whether a stdout error is its reader gone away (a closed pipe), not output lost. */
function readerGone (err: NodeJS.ErrnoException): boolean {
  return err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED'
}

/**
 * Watch stdout's failures instead of letting an unhandled EPIPE end the
 * command with a stack trace. Output lost for another reason is reported
 * (once) and fails the command.
 */
function guardStdout (): void {
  if (stdoutWatched) return
  stdoutWatched = true
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    stdoutFailures.count++
    stdoutFailures.last = err
    if (!readerGone(err)) {
      if (stdoutFailures.lost === 0) sayError('OUTPUT_FAILED', `cannot write the output to stdout: ${err.message ?? String(err)}`)
      stdoutFailures.lost++
      process.exitCode = EXIT_REFUSED
    }
    for (const f of [...stdoutGoneListeners]) f()
    stdoutGoneListeners.clear()
  })
}

/**
 * Call `onGone` once when stdout fails (its reader went away or its output is
 * lost; at once if it already did): there is no point going on. The returned
 * function stops calling it.
 */
export function watchStdout (onGone: () => void): () => void {
  guardStdout()
  if (stdoutGone()) onGone()
  else stdoutGoneListeners.add(onGone)
  return () => { stdoutGoneListeners.delete(onGone) }
}

/** Write to stdout unless it failed already. */
export function writeOut (text: string): void {
  guardStdout()
  if (!stdoutGone()) process.stdout.write(text)
}

/** Print a command's result. */
export function print (out: Output, json: boolean): void {
  if (json) writeOut(JSON.stringify(out.json) + '\n')
  else if (out.text !== '') writeOut(printableLines(out.text.endsWith('\n') ? out.text.slice(0, -1) : out.text) + '\n')
}

/** The error line on stderr: the message may quote a peer (an executor's error frame, a failure reason). */
function sayError (code: string, message: string): void {
  process.stderr.write(`aap-mesh: ${printable(code)}: ${printable(message)}\n`)
}

/** Report an error the way every command does, and set the exit code. */
export function fail (err: unknown, json: boolean): void {
  let code: string
  let message: string
  let exit: number
  let status: number | undefined
  if (err instanceof UsageError) {
    code = 'INVALID_REQUEST'
    message = err.message
    exit = EXIT_USAGE
  } else if (err instanceof UnfinishedError) {
    code = err.code
    message = err.message
    exit = err.exit
  } else if (err instanceof ApiUnreachableError) {
    code = 'UNREACHABLE'
    message = err.message
    exit = EXIT_UNREACHABLE
  } else if (err instanceof ApiError) {
    code = err.code
    message = err.message
    status = err.status
    exit = EXIT_REFUSED
  } else if (err instanceof AapError && err.details?.reason === 'no_node') {
    code = 'UNREACHABLE'
    message = err.message
    exit = EXIT_UNREACHABLE
  } else if (err instanceof AapError) {
    code = err.code
    message = err.message
    exit = EXIT_USAGE
  } else {
    code = 'INTERNAL'
    message = err instanceof Error ? err.message : String(err)
    exit = EXIT_REFUSED
  }
  if (json) writeOut(JSON.stringify({ error: { code, message, ...(status === undefined ? {} : { status }) } }) + '\n')
  sayError(code, message)
  process.exitCode = exit
}

/**
 * The action of a remote command: `run` gets the client, the options and the
 * positional arguments, and returns what to print.
 */
export function remoteAction<O extends RemoteOptions> (run: (client: ApiClient, opts: O, args: string[]) => Promise<Output | undefined>) {
  return async (...received: unknown[]): Promise<void> => {
    const cmd = received.at(-1) as Command
    const opts = cmd.opts<O>()
    const args = received.slice(0, -2).filter((a): a is string => typeof a === 'string')
    try {
      const client = await clientFor(opts, cmd)
      const out = await run(client, opts, args)
      if (out !== undefined) print(out, opts.json)
      if (out?.unfinished !== undefined) {
        sayError(out.unfinished.code, out.unfinished.message)
        process.exitCode = out.unfinished.exit
      }
    } catch (err) {
      fail(err, opts.json)
    }
  }
}

/** A JSON object from an option: inline JSON, or @file. */
export async function jsonObjectArg (value: string | undefined, option: string): Promise<Record<string, unknown> | undefined> {
  if (value === undefined) return undefined
  let text = value
  if (value.startsWith('@')) {
    try {
      text = await readFile(value.slice(1), 'utf8')
    } catch (err) {
      throw new UsageError(`${option}: cannot read ${value.slice(1)}: ${(err as Error).message}`)
    }
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    throw new UsageError(`${option} must be a JSON object (or @file): ${(err as Error).message}`)
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new UsageError(`${option} must be a JSON object, not ${Array.isArray(parsed) ? 'an array' : typeof parsed}`)
  return parsed as Record<string, unknown>
}

/** Path segment of a run or correlation id. */
export function seg (id: string): string {
  return encodeURIComponent(id)
}
