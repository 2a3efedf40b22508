/**
 * `aap-mesh ui`: a one-time login link to the running node's browser view.
 * The link carries a single-use code (never the API token), good for
 * UI_LOGIN_CODE_TTL_MS; the node exchanges it for a session cookie and
 * redirects to a clean URL. The command prints the link and opens it in the
 * desktop's browser unless --no-open.
 */
import { spawn } from 'node:child_process'
import type { Command } from 'commander'
import { remoteAction, remoteCommand, type RemoteOptions } from './remote.ts'

interface LoginCode { code: string, url: string, expires_at: string }

/** The desktop's opener for a URL, per platform. */
function opener (): string {
  if (process.platform === 'darwin') return 'open'
  if (process.platform === 'win32') return 'explorer.exe'
  return 'xdg-open'
}

/** Start the browser on `url`; a missing opener is told on stderr, never fatal (the link is printed). */
function openBrowser (url: string): void {
  const cmd = opener()
  const child = spawn(cmd, [url], { stdio: 'ignore', detached: true })
  child.on('error', (err) => {
    process.stderr.write(`aap-mesh: could not start ${cmd} (${err.message}); open the link yourself\n`)
  })
  child.unref()
}

export function registerUi (program: Command): Command {
  return remoteCommand(program, 'ui', 'print (and open) a one-time login link to the node\'s browser view')
    .option('--no-open', 'only print the link')
    .addHelpText('after', '\nThe link works once, for a minute; the page then lives on a session cookie. Run the command again for a new link.')
    .action(remoteAction<RemoteOptions & { open: boolean }>(async (client, opts) => {
      const login = await client.call<LoginCode>('POST', '/v1/ui/login-codes')
      if (opts.open) openBrowser(login.url)
      return {
        json: login,
        text: `${login.url}\n(works once, until ${new Date(login.expires_at).toLocaleTimeString()})`
      }
    }))
}
