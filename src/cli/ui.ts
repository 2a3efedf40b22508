/**
 * `aap-mesh ui`: a one-time login link to the running node's browser view.
 * The link carries a single-use code (never the API token), good for
 * UI_LOGIN_CODE_TTL_MS; the node exchanges it for a session cookie and a
 * session secret (in the URL fragment, which the page moves to the tab's
 * sessionStorage) and leaves a clean URL. The command prints the link and opens it in the
 * desktop's browser unless --no-open (through a page only this user can
 * read: the link is never a process argument).
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { lstat, mkdir, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import type { Command } from 'commander'
import { callShaped } from './answers.ts'
import { printable } from './printable.ts'
import { remoteAction, remoteCommand, type RemoteOptions } from './remote.ts'

interface LoginCode { code: string, url: string, expires_at: string }

/** The desktop's opener for a URL, per platform. */
function opener (): string {
  if (process.platform === 'darwin') return 'open'
  if (process.platform === 'win32') return 'explorer.exe'
  return 'xdg-open'
}

/** Pages older than this in the private folder are removed by the next `aap-mesh ui` (their codes expired long before). */
const STALE_PAGE_MS = 10 * 60_000

/**
 * A page that sends the browser on to `url`, in a folder only this user can
 * read: the opener and the browser are given its path, not the link, since a
 * process's arguments are readable by every local user (/proc/<pid>/cmdline)
 * and the link's code is a login until it is used.
 */
async function redirectPage (url: string): Promise<string> {
  const dir = join(tmpdir(), `aap-mesh-ui-${process.getuid?.() ?? 'user'}`)
  await mkdir(dir, { recursive: true, mode: 0o700 })
  const info = await lstat(dir)
  // Windows has no POSIX modes (its per-user temp folder is what keeps the page private there)
  const shared = process.platform !== 'win32' && (info.mode & 0o077) !== 0
  if (!info.isDirectory() || (process.getuid !== undefined && info.uid !== process.getuid()) || shared) {
    throw new Error(`${dir} is not a folder of this user's alone`)
  }
  const now = Date.now()
  for (const name of await readdir(dir)) {
    const f = join(dir, name)
    if (now - (await lstat(f)).mtimeMs > STALE_PAGE_MS) await rm(f, { force: true })
  }
  const file = join(dir, `login-${randomBytes(8).toString('hex')}.html`)
  const href = JSON.stringify(url).replaceAll('<', '\\u003c')
  await writeFile(file, `<!doctype html><meta charset="utf-8"><title>aap-mesh</title><script>location.replace(${href})</script>\n`, { mode: 0o600, flag: 'wx' })
  return file
}

/** Start the browser on `url`; a missing opener is told on stderr, never fatal (the link is printed). */
async function openBrowser (url: string): Promise<void> {
  const cmd = opener()
  let target: string
  try {
    target = pathToFileURL(await redirectPage(url)).href
  } catch (err) {
    process.stderr.write(`aap-mesh: could not write the login page (${(err as Error).message}); open the link yourself\n`)
    return
  }
  const child = spawn(cmd, [target], { stdio: 'ignore', detached: true })
  child.on('error', (err) => {
    process.stderr.write(`aap-mesh: could not start ${cmd} (${err.message}); open the link yourself\n`)
  })
  child.unref()
}

export function registerUi (program: Command): Command {
  return remoteCommand(program, 'ui', 'print (and open) a one-time login link to the node\'s browser view')
    .option('--no-open', 'only print the link')
    .addHelpText('after', '\nThe link works once, for a minute, and opens the view in one tab (a reload keeps it; a new tab needs a new link). Run the command again for a new link.')
    .action(remoteAction<RemoteOptions & { open: boolean }>(async (client, opts) => {
      const login = await callShaped<LoginCode>(client, 'POST', '/v1/ui/login-codes', { url: 'string', expires_at: 'string' })
      if (opts.open) await openBrowser(login.url)
      return {
        json: login,
        text: `${printable(login.url)}\n(works once, until ${new Date(login.expires_at).toLocaleTimeString()})`
      }
    }))
}
