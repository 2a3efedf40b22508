/**
 * Command-line options of a script, parsed strictly (node:util parseArgs): an
 * unknown option, a missing value or a stray argument ends the script with
 * the reason and its usage line on stderr and exit code 2, not a stack trace.
 * `--help` prints the usage and exits 0.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util'

type Options = NonNullable<ParseArgsConfig['options']>

export function parseOptions<T extends Options> (options: T, usage: string, args: string[] = process.argv.slice(2)): ReturnType<typeof parseArgs<{ options: T, args: string[] }>>['values'] {
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(`${usage}\n`)
    process.exit(0)
  }
  try {
    return parseArgs({ options, args }).values
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err)
    process.stderr.write(`${reason}\n${usage}\n`)
    process.exit(2)
  }
}
