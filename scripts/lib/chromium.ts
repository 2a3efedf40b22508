/**
 * Debian's chromium, driven by playwright-core, for the tests and scripts of
 * the node's browser view. `ensureChromium` installs the package when
 * /usr/bin/chromium is missing (apt-get, as root); `openBrowser` starts a
 * headless browser with a fresh profile that is removed on close.
 */
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type BrowserContext } from 'playwright-core'

export const CHROMIUM_PATH = '/usr/bin/chromium'
/** Starting the browser gives up after this long. */
export const CHROMIUM_LAUNCH_TIMEOUT_MS = 60_000

/** Flags for a quiet headless browser that talks to nobody but the page's server (and runs as root). */
const FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'
]

/** Install Debian's chromium when it is missing; throws when that fails. */
export function ensureChromium (): void {
  if (existsSync(CHROMIUM_PATH)) return
  for (const args of [['update'], ['install', '-y', 'chromium']]) {
    const r = spawnSync('apt-get', args, { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } })
    if (r.status !== 0) throw new Error(`apt-get ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status}`}): the browser tests need ${CHROMIUM_PATH}`)
  }
  if (!existsSync(CHROMIUM_PATH)) throw new Error(`apt-get installed chromium but ${CHROMIUM_PATH} is still missing`)
}

export interface Browser {
  context: BrowserContext
  close: () => Promise<void>
}

/** A headless chromium with a fresh profile directory. */
export async function openBrowser (viewport = { width: 1440, height: 900 }): Promise<Browser> {
  ensureChromium()
  const profile = await mkdtemp(join(tmpdir(), 'aap-chromium-'))
  let context: BrowserContext
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM_PATH,
      headless: true,
      args: FLAGS,
      viewport,
      timeout: CHROMIUM_LAUNCH_TIMEOUT_MS
    })
  } catch (err) {
    await rm(profile, { recursive: true, force: true })
    throw err
  }
  return {
    context,
    close: async () => {
      await context.close()
      await rm(profile, { recursive: true, force: true })
    }
  }
}
