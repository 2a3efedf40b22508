/**
 * `aap-mesh conformance <multiaddr | agent id>`: run the conformance kit
 * against a node over the wire, print the clause table, write the JSON and
 * Markdown reports. Exit 0 when every MUST passed, 1 when one failed or is
 * undecided, 2 on wrong arguments, 3 when the target cannot be reached, 4
 * when a report could not be written (the table is printed first), 130
 * when interrupted (the check under way stops, its runs on the target are
 * canceled, and the kit's nodes stop and remove their folders).
 */
import { Option, type Command } from 'commander'
import { EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from './remote.ts'
import { onInterrupt } from './signals.ts'

interface ConformanceOptions {
  bootstrap?: string[]
  json: string
  markdown: string
  logLevel: string
}

/** The kit ran, but a report could not be written: not a verdict on the target (1 is one). */
export const EXIT_REPORTS_UNWRITTEN = 4

const DEFAULT_JSON = 'reports/conformance.json'
const DEFAULT_MARKDOWN = 'reports/conformance.md'

function collect (value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value]
}

/** Why the target (given as a multiaddr) or a --bootstrap is no multiaddr, or undefined when each is one. */
async function wrongAddress (target: string, bootstrap: string[] | undefined): Promise<string | undefined> {
  const { checkMultiaddrs } = await import('./start-args.ts')
  try {
    await checkMultiaddrs(bootstrap === undefined ? {} : { bootstrap })
  } catch (err) {
    return (err as Error).message
  }
  if (!target.startsWith('/')) return undefined
  const { multiaddr } = await import('@multiformats/multiaddr')
  try {
    multiaddr(target)
  } catch (err) {
    return `the target ${target} is not a multiaddr (${(err as Error).message}); write one like /ip4/203.0.113.7/tcp/4001/p2p/<agent id>`
  }
  return undefined
}

export function registerConformance (program: Command): Command {
  return program.command('conformance')
    .description('test a node (any AAP implementation) over the wire against the AAP 0.1.0-draft profile and the Loops inter-layer contracts; prints a clause-by-clause table')
    .argument('<target>', 'the node under test: a multiaddr ending in /p2p/<agent id>, or an agent id (with --bootstrap)')
    .option('--bootstrap <multiaddr>', 'a peer to reach the mesh through when the target is given by agent id, repeatable', collect)
    .option('--json <file>', 'write the JSON report here', DEFAULT_JSON)
    .option('--markdown <file>', 'write the Markdown report here', DEFAULT_MARKDOWN)
    .addOption(new Option('--log-level <level>', 'the kit\'s own log on stderr').choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('warn'))
    .addHelpText('after', `
The target must serve cap:aap-conformance@0.1.0 with the conformance agent
(aap-mesh start --conformance-agent; see protocols/conformance.md).
Exit codes: 0 every MUST passed, 1 a MUST failed or is undecided, 2 wrong arguments, 3 target unreachable,
${EXIT_REPORTS_UNWRITTEN} the reports could not be written (the table is printed all the same).`)
    .action(async (target: string, opts: ConformanceOptions) => {
      const { runConformance } = await import('../conformance/runner.ts')
      const { MARK, terminalTable, writeReports } = await import('../conformance/report.ts')
      const { clean } = await import('../conformance/kit.ts')
      const { KIT_MESSAGE_MAX_CHARS } = await import('../conformance/constants.ts')
      const { createLogger, isLogLevel } = await import('../logger.ts')
      if (!target.startsWith('/') && (opts.bootstrap ?? []).length === 0) {
        process.stderr.write('error: a target given by agent id needs --bootstrap <multiaddr>\n')
        process.exitCode = EXIT_USAGE
        return
      }
      // a mistyped address is the caller's mistake, not an unreachable target
      const wrong = await wrongAddress(target, opts.bootstrap)
      if (wrong !== undefined) {
        process.stderr.write(`error: ${clean(wrong, KIT_MESSAGE_MAX_CHARS)}\n`)
        process.exitCode = EXIT_USAGE
        return
      }
      const log = createLogger(isLogLevel(opts.logLevel) ? opts.logLevel : 'warn')
      const command = [
        'aap-mesh', 'conformance', target, ...(opts.bootstrap ?? []).flatMap(b => ['--bootstrap', b]),
        ...(opts.json === DEFAULT_JSON ? [] : ['--json', opts.json]), ...(opts.markdown === DEFAULT_MARKDOWN ? [] : ['--markdown', opts.markdown])
      ].join(' ')
      // a reader that goes away (| head) must not end the kit before it wrote its reports
      process.stdout.on('error', (err: NodeJS.ErrnoException) => { log.debug({ code: err.code }, 'stdout failed: the table is not printed; the reports are written') })
      const interrupt = new AbortController()
      const release = onInterrupt((signal) => {
        process.stderr.write(`${signal}: stopping the kit (again to end at once)\n`)
        interrupt.abort(new Error(signal))
      }, ['SIGINT', 'SIGTERM'])
      let report
      try {
        report = await runConformance({
          target,
          ...(opts.bootstrap === undefined ? {} : { bootstrap: opts.bootstrap }),
          command,
          log,
          signal: interrupt.signal,
          // the runner cleaned and cut the message already
          onCheck: (r) => { process.stderr.write(`  ${MARK[r.status]}  ${r.id} (${r.ms} ms)${r.message === null ? '' : `: ${r.message}`}\n`) }
        })
      } catch (err) {
        // the message may quote the target (an unreachable address, a card it served)
        process.stderr.write(`error: ${clean((err as Error).message, KIT_MESSAGE_MAX_CHARS)}\n`)
        process.exitCode = interrupt.signal.aborted ? EXIT_INTERRUPTED : EXIT_UNREACHABLE
        return
      } finally {
        release()
      }
      // the reports before the table (a reader gone from stdout must not cost them); one that cannot be
      // written must not cost the table either: the run's result is printed, then the failure said
      let unwritten: Error | undefined
      try {
        await writeReports(report, { json: opts.json, markdown: opts.markdown })
      } catch (err) {
        unwritten = err as Error
      }
      process.stdout.write(`${terminalTable(report, process.stdout.columns ?? 160)}\n`)
      if (unwritten !== undefined) {
        process.stderr.write(`error: the reports could not be written (${opts.json}, ${opts.markdown}): ${unwritten.message}\n`)
        process.exitCode = EXIT_REPORTS_UNWRITTEN
        return
      }
      process.stdout.write(`reports: ${opts.json}, ${opts.markdown}\n`)
      // a MUST the kit could not decide (a capacity refusal) is not shown to pass either
      process.exitCode = report.summary.must_failed.length > 0 || report.summary.must_inconclusive.length > 0 ? EXIT_REFUSED : 0
    })
}
