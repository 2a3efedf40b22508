/**
 * The layer rule of docs/architecture.md, checked from the import graph of
 * src/: a module imports from its own folder or from folders of lower layers
 * only. The layers are read from the table in docs/architecture.md, so the
 * document and this test cannot drift apart. Also: raw stream I/O stays in
 * src/wire, and no error is dropped in an empty catch.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const src = join(root, 'src')

/** folder (or top-level file) under src -> layer, from the doc's table rows `| n | \`a\`, \`b\` | … |`. */
function layersFromDoc (): Map<string, number> {
  const doc = readFileSync(join(root, 'docs/architecture.md'), 'utf8')
  const start = doc.indexOf('<!-- layers:')
  const table = doc.slice(start, doc.indexOf('\n\n', doc.indexOf('|', start)))
  const layers = new Map<string, number>()
  for (const row of table.split('\n')) {
    const m = /^\| (\d+) \| ([^|]+) \|/.exec(row)
    if (m === null) continue
    for (const name of (m[2] ?? '').matchAll(/`([^`]+)`/g)) layers.set(name[1] ?? '', Number(m[1]))
  }
  return layers
}

function sourceFiles (dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return name.endsWith('.ts') ? [path] : []
  })
}

/** The unit a file belongs to: its first folder under src, or the file name for top-level files. */
function unitOf (file: string): string {
  const rel = relative(src, file).split('/')
  return rel.length === 1 ? rel[0] ?? '' : rel[0] ?? ''
}

const IMPORT = /(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g

function importsOf (file: string): string[] {
  const text = readFileSync(file, 'utf8')
  return [...text.matchAll(IMPORT)].map(m => m[1] ?? m[2] ?? '').filter(s => s.startsWith('.'))
}

describe('architecture', () => {
  const layers = layersFromDoc()
  const files = sourceFiles(src)

  it('docs/architecture.md names a layer for every folder and top-level file of src/', () => {
    expect(layers.size).toBeGreaterThan(5)
    const units = [...new Set(files.map(unitOf))].sort()
    expect(units.filter(u => !layers.has(u))).toEqual([])
  })

  it('imports only go downward (or stay in their own folder)', () => {
    const broken: string[] = []
    for (const file of files) {
      const from = unitOf(file)
      for (const spec of importsOf(file)) {
        const target = resolve(dirname(file), spec)
        if (!target.startsWith(src + '/')) continue // protocols/*.json, package.json
        const to = unitOf(target)
        if (to === from) continue
        const a = layers.get(from) ?? -1
        const b = layers.get(to) ?? Number.POSITIVE_INFINITY
        if (b >= a) broken.push(`${relative(root, file)} (layer ${a}) imports ${relative(root, target)} (layer ${b})`)
      }
    }
    expect(broken).toEqual([])
  })

  it('raw stream I/O lives in src/wire only', () => {
    const outside = files.filter(f => unitOf(f) !== 'wire')
      .filter(f => /\.(dialProtocol|newStream)\(|\bStreamMessageEvent\b/.test(readFileSync(f, 'utf8')))
      .map(f => relative(root, f))
    expect(outside).toEqual([])
  })

  it('no error is dropped silently: no `.catch(() => {})` and no empty catch block in src/', () => {
    const dropped: string[] = []
    for (const file of files) {
      const lines = readFileSync(file, 'utf8').split('\n')
      lines.forEach((line, i) => {
        if (/\.catch\(\s*\(\)\s*=>\s*\{\s*\}\s*\)/.test(line) || /catch\s*(\([^)]*\))?\s*\{\s*(\/\*[^*]*\*\/)?\s*\}/.test(line)) {
          dropped.push(`${relative(root, file)}:${i + 1}`)
        }
      })
    }
    expect(dropped).toEqual([])
  })

  it('no file in src/ is over 500 lines', () => {
    const long = files.map(f => [relative(root, f), readFileSync(f, 'utf8').trimEnd().split('\n').length] as const)
      .filter(([, n]) => n > 500)
    expect(long).toEqual([])
  })
})
