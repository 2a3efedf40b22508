/**
 * A run of some parts (`--part`) into a report that already holds the
 * figures of others keeps those: each part not run now whose row and section
 * the earlier report holds gets them back, with the command and start of the
 * invocation that measured them.
 */
import { readFile } from 'node:fs/promises'

function rowOf (text: string, name: string): string | undefined {
  return text.split('\n').find(l => l.startsWith(`| ${name}: `))
}

function sectionOf (text: string, name: string): string | undefined {
  const at = text.indexOf(`\n## ${name}: `)
  if (at < 0) return undefined
  const end = text.indexOf('\n## ', at + 1)
  return text.slice(at + 1, end < 0 ? undefined : end).trimEnd()
}

/** `next` with the rows and sections of the parts in `earlier` that `next` did not run. */
export function carryOver (earlier: string, next: string, notRun: string[]): string {
  const command = /- command: (`[^`]*`)/.exec(earlier)?.[1] ?? 'an earlier command'
  const started = /- started: ([^,]*),/.exec(earlier)?.[1] ?? 'earlier'
  let out = next
  const sections: string[] = []
  for (const name of notRun) {
    const row = rowOf(earlier, name)
    const section = sectionOf(earlier, name)
    const newRow = rowOf(out, name)
    if (row === undefined || section === undefined || newRow === undefined || row.includes('| not built |')) continue
    out = out.replace(newRow, row)
    const from = `Figures of an earlier invocation: ${command}, started ${started}.`
    sections.push(section.includes('Figures of an earlier invocation:') ? section : section.replace(/\n\nOutcome: /, `\n\n${from}\n\nOutcome: `))
  }
  if (sections.length === 0) return out
  const notBuilt = out.indexOf('\n## Not built')
  const block = sections.join('\n\n') + '\n'
  return notBuilt < 0 ? out.trimEnd() + '\n\n' + block : out.slice(0, notBuilt + 1) + block + out.slice(notBuilt)
}

export async function readEarlier (path: string): Promise<string> {
  try {
    return await readFile(path, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return ''
    throw err
  }
}
