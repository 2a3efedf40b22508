/**
 * `aap-mesh start` writes its events as JSON lines on stdout. A supervisor
 * that reads the `started` line and closes the pipe must not end the node:
 * the next line hit EPIPE, which nothing handled, and the process died at
 * once, without its graceful stop. Now the node logs it once, writes no more
 * lines, and still stops cleanly on SIGTERM.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { NodeProc, TempDirs } from './cli-helpers.ts'

describe('a node whose stdout reader went away', () => {
  const dirs = new TempDirs()
  afterAll(async () => { await dirs.cleanup() })

  it('goes on, and stops cleanly on SIGTERM', async () => {
    const node = new NodeProc(await dirs.make(), ['--name', 'no-reader'])
    try {
      await node.started()
      node.proc.stdout!.destroy()
      // the stop writes its `stopped` line into the closed pipe
      const { code, signal } = await node.stop('SIGTERM')
      expect({ code, signal }).toEqual({ code: 0, signal: null })
      expect(node.stderr).not.toMatch(/EPIPE.*\n.*at /)
    } finally {
      await node.stop()
    }
  })
})
