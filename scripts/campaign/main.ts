/**
 * `npm run campaign [-- --quick] [-- --part <name>] [-- --skip <name>] [-- --seed <n>] [-- --kills <n>] [-- --out <file>]`:
 * the fault and attack campaign of issue #18. Runs each built part (bounded,
 * self-stopping, against real nodes on this machine) and writes the figures
 * to docs/reliability.md (a full run) or reports/reliability-quick.md (--quick,
 * so a quick run never replaces the full figures). Exits 1 when a part fails
 * or a "must" figure does not hold.
 */
import { resolve } from 'node:path'
import { runDiskFaults } from './disk-faults.ts'
import { runForgeries } from './forgeries.ts'
import { runFuzz } from './fuzz.ts'
import { runSlowClients } from './slow-clients.ts'
import { runHostileDht } from './hostile-dht.ts'
import { runKill9 } from './kill9.ts'
import { runSpam } from './spam.ts'
import { markdown, passed, writeReport, type PartResult } from './report.ts'
import { carryOver, readEarlier } from './carry.ts'
import { parseOptions } from '../lib/options.ts'
import { PART_TIMEOUT_FULL_MS, PART_TIMEOUT_QUICK_MS } from './constants.ts'
import { withPartTimeout } from './part-timeout.ts'

const USAGE = 'usage: npm run campaign [-- --quick] [--part <name>] [--skip <name>] [--seed <n>] [--kills <n>] [--out <file>]'
// strict: a mistyped --quick must not start the full campaign, which rewrites docs/reliability.md
const values = parseOptions({
  quick: { type: 'boolean', default: false },
  part: { type: 'string' },
  skip: { type: 'string' },
  seed: { type: 'string' },
  kills: { type: 'string' },
  out: { type: 'string' }
}, USAGE)

interface Part {
  name: string
  title: string
  run?: (quick: boolean, seed: number) => Promise<PartResult>
}

const PARTS: Part[] = [
  {
    name: 'kill9',
    title: 'kill -9 of executors, delegators and sidecars under load',
    run: async (quick, seed) => {
      const o = quick ? { kills: 10, executors: 2, sidecars: 1, delegators: 2, workers: 3, deadlineMs: 25_000, seed } : { kills: 1_000, executors: 4, sidecars: 2, delegators: 3, workers: 3, deadlineMs: 1_080_000, seed }
      // `--kills N`: a shorter (or longer) storm of the same form, for a look between full runs
      const kills = arg('--kills')
      return runKill9(kills === undefined ? o : { ...o, kills: Number(kills) })
    }
  },
  {
    name: 'fuzz',
    title: 'mutated frames on every stream protocol against a node process',
    run: async (quick, seed) => runFuzz({ framesPerProtocol: quick ? 3_000 : 100_000, windowMs: quick ? 4_000 : 15_000, seed })
  },
  {
    name: 'forgeries',
    title: 'forged cards, tickets, events and commands against real nodes',
    run: async (quick, seed) => runForgeries({ perKind: quick ? 60 : 300, seed })
  },
  { name: 'hostile-dht', title: '30% hostile DHT nodes (drop, forge, stale, eclipse, flood)', run: async (quick, seed) => runHostileDht({ nodes: quick ? 16 : 40, lookups: quick ? 30 : 400, seed }) },
  {
    name: 'spam',
    title: 'topic, stream and gossip floods',
    run: async (quick, seed) => runSpam({ topics: quick ? 10_000 : 1_000_000, messages: quick ? 5_000 : 100_000, windowMs: quick ? 4_000 : 15_000, seed })
  },
  { name: 'slow-clients', title: 'SSE consumers that stop reading, hanging webhooks, agents that never take work', run: async (quick, seed) => runSlowClients({ rounds: quick ? 2 : 4, runsPerRound: 250, slowWorkReaders: quick ? 4 : 16, slowEventReaders: quick ? 4 : 16, chattyEvents: quick ? 400 : 800, maxBufferedBytes: 256 * 1024, heartbeatMs: 500, seed }) },
  { name: 'disk-faults', title: 'a datastore that fails writes or runs out of space', run: async (quick, seed) => runDiskFaults({ rounds: quick ? 5 : 20, perRound: quick ? 20 : 25, seed }) }
]

function arg (name: '--part' | '--skip' | '--seed' | '--kills' | '--out'): string | undefined {
  return values[name.slice(2) as 'part' | 'skip' | 'seed' | 'kills' | 'out']
}

async function main (): Promise<void> {
  const quick = values.quick === true
  const only = arg('--part')
  // a part left out of this run (its figures are carried over like with --part)
  const skip = arg('--skip')
  const seed = Number(arg('--seed') ?? Date.now() % 1_000_000)
  for (const name of [only, skip]) {
    if (name !== undefined && !PARTS.some(p => p.name === name)) throw new Error(`no part "${name}"; parts: ${PARTS.map(p => p.name).join(', ')}`)
  }
  const out = resolve(arg('--out') ?? (quick ? 'reports/reliability-quick.md' : 'docs/reliability.md'))
  const command = ['npm run campaign', ...(process.argv.length > 2 ? ['--', ...process.argv.slice(2)] : [])].join(' ')
  const started = new Date()
  const results: PartResult[] = []
  for (const p of PARTS) {
    if (p.run === undefined) { results.push({ name: p.name, title: p.title, built: false, ran: false }); continue }
    if ((only !== undefined && p.name !== only) || p.name === skip) { results.push({ name: p.name, title: p.title, built: true, ran: false }); continue }
    console.log(`campaign: ${p.name} (${quick ? 'quick' : 'full'}, seed ${seed}) ...`)
    const t0 = performance.now()
    const run = p.run
    const r = await withPartTimeout(p.name, p.title, async () => run(quick, seed), quick ? PART_TIMEOUT_QUICK_MS : PART_TIMEOUT_FULL_MS)
    r.seconds ??= (performance.now() - t0) / 1000
    results.push(r)
    console.log(`campaign: ${p.name}: ${passed(r) ? 'pass' : 'FAIL'} in ${((performance.now() - t0) / 1000).toFixed(0)} s`)
    for (const m of r.musts ?? []) console.log(`  ${m.value <= m.max ? 'ok  ' : 'FAIL'} ${m.figure}: ${m.value} (≤ ${m.max})`)
    for (const [k, v] of r.figures ?? []) console.log(`       ${k}: ${v}`)
    if (r.error !== undefined) console.log(`  error: ${r.error}`)
  }
  await writeReport(out, only === undefined && skip === undefined ? markdown(command, results, started) : carryOver(await readEarlier(out), markdown(command, results, started), results.filter(r => !r.ran).map(r => r.name)))
  console.log(`campaign: figures written to ${out}`)
  const ran = results.filter(r => r.ran)
  const failed = ran.filter(r => !passed(r))
  console.log(`campaign: ${ran.length - failed.length} passed, ${failed.length} failed`)
  process.exit(failed.length === 0 ? 0 : 1)
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
