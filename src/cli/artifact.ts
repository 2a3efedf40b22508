/**
 * `aap-mesh artifact put <file>`, `aap-mesh artifact get <id> --out <file>`,
 * `aap-mesh artifact ls` and `aap-mesh artifact rm <id>`: artifacts through the local API, streamed
 * both ways (a file is never read or written whole in memory).
 */
import { constants, createReadStream, createWriteStream } from 'node:fs'
import { access, rename, rm, stat } from 'node:fs/promises'
import { basename, dirname } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { Command } from 'commander'
import type { FilePart } from '../artifacts/types.ts'
import type { ArtifactPage } from '../artifacts/service.ts'
import { ARTIFACT_LIST_MAX_LIMIT } from '../artifacts/constants.ts'
import { readPages } from './pages.ts'
import { callShaped, shaped } from './answers.ts'
import { printable } from './printable.ts'
import { collect, idArg, positiveInt, remoteAction, remoteCommand, UsageError, type RemoteOptions } from './remote.ts'

export function registerArtifact (program: Command): void {
  const artifact = program.command('artifact').description('store a file as an artifact, save an artifact (from this node or any holder) to a file, list the artifacts on this node, or remove one')

  remoteCommand(artifact, 'put', 'store a file as an artifact on this node and print the part that names it')
    .argument('<file>', 'the file to store')
    .option('--media-type <type>', 'its media type', 'application/octet-stream')
    .option('--name <name>', 'the name to put in the part (default: the file\'s name)')
    .action(remoteAction<RemoteOptions & { mediaType: string, name?: string }>(async (client, opts, args) => {
      const file = args[0] ?? ''
      // a directory or an unreadable file is the caller's mistake, said before anything is sent
      let regular: boolean
      try {
        regular = (await stat(file)).isFile()
        await access(file, constants.R_OK)
      } catch (err) {
        throw new UsageError(`cannot read ${file}: ${(err as Error).message}`)
      }
      if (!regular) throw new UsageError(`${file} is not a regular file: artifact put stores one file`)
      const answer = await client.upload<unknown>('/v1/artifacts', createReadStream(file), opts.mediaType, { name: opts.name ?? basename(file) })
      const { part } = shaped<{ part: FilePart }>(client, 'POST /v1/artifacts', answer, { part: 'object' })
      return { json: { part }, text: `artifact ${printable(String(part.artifact))}\n${printable(`  ${part.size} bytes, ${part.media_type}${part.name === undefined ? '' : `, ${part.name}`}`)}` }
    }))

  remoteCommand(artifact, 'get', 'save an artifact to a file, fetched and verified from its holders if this node lacks it')
    .argument('<artifact>', 'the artifact id (a file part\'s "artifact")')
    .requiredOption('-o, --out <file>', 'where to save it')
    .option('--from <agent-id>', 'an agent that holds it (e.g. the run\'s executor), repeatable', collect)
    .action(remoteAction<RemoteOptions & { out: string, from?: string[] }>(async (client, opts, args) => {
      const id = idArg(args[0], '<artifact>')
      // a folder that is not there is the caller's mistake, said before the artifact is fetched
      const folder = dirname(opts.out)
      const inFolder = await stat(folder).then(s => s.isDirectory(), (err: NodeJS.ErrnoException) => {
        throw new UsageError(`cannot write ${opts.out}: ${err.code === 'ENOENT' ? `no folder ${folder}` : err.message}`)
      })
      if (!inFolder) throw new UsageError(`cannot write ${opts.out}: ${folder} is not a folder`)
      const there = await stat(opts.out).then(s => s, (err: NodeJS.ErrnoException) => {
        // nothing there yet is the usual case; anything else the write below reports
        if (err.code !== 'ENOENT') throw new UsageError(`cannot write ${opts.out}: ${err.message}`)
        return undefined
      })
      if (there?.isDirectory() === true) throw new UsageError(`${opts.out} is a directory: give -o the file to save the artifact as`)
      const got = await client.download(`/v1/artifacts/${encodeURIComponent(id)}`, { from: opts.from })
      // written beside the target and renamed at the end: a failed transfer leaves no half file under its name
      const partial = `${opts.out}.partial`
      try {
        await pipeline(Readable.fromWeb(got.body as import('node:stream/web').ReadableStream<Uint8Array>), createWriteStream(partial))
        const size = (await stat(partial)).size
        if (got.size !== undefined && size !== got.size) throw new Error(`the node sent ${size} of ${got.size} bytes`)
        await rename(partial, opts.out)
        return { json: { artifact: id, file: opts.out, size }, text: `saved ${id}\n  to ${opts.out} (${size} bytes)` }
      } catch (err) {
        await rm(partial, { force: true })
        throw err
      }
    }))

  remoteCommand(artifact, 'ls', 'list the artifacts on this node (pinned: made here; copy: fetched, evicted when room is needed) and how full its store is')
    .option('--limit <n>', `at most this many per page (1-${ARTIFACT_LIST_MAX_LIMIT})`, positiveInt(ARTIFACT_LIST_MAX_LIMIT))
    .option('--cursor <cursor>', 'start at this page (the next_cursor a listing printed)')
    .option('--all', 'follow the cursors to the end of the listing', false)
    .action(remoteAction<RemoteOptions & { limit?: number, cursor?: string, all: boolean }>(async (client, opts) => {
      const { pages, unfinished } = await readPages(opts.cursor, opts.all, async cursor => callShaped<ArtifactPage>(client, 'GET', '/v1/artifacts', { artifacts: 'array', next_cursor: 'string|null' }, undefined, { limit: opts.limit, cursor }), p => p.artifacts.length)
      // the last page's store figures and cursor, every page's artifacts
      const last = pages[pages.length - 1] as ArtifactPage
      const list: ArtifactPage = { ...last, artifacts: pages.flatMap(p => p.artifacts) }
      const lines = list.artifacts.map(a => printable(`${a.artifact}  ${a.size} bytes  ${a.pinned ? 'pinned' : 'copy'}  last used ${a.last_used}`))
      if (list.next_cursor !== null) lines.push(`more: --cursor ${printable(list.next_cursor)}`)
      lines.push(`store: ${list.used_bytes} of ${list.max_bytes} bytes, ${list.count} of ${list.max_count} artifacts`)
      return { json: list, text: lines.join('\n'), ...(unfinished === undefined ? {} : { unfinished }) }
    }))

  remoteCommand(artifact, 'rm', 'remove an artifact from this node\'s store (one it made or fetched); other holders keep theirs')
    .argument('<artifact>', 'the artifact id (a file part\'s "artifact")')
    .action(remoteAction(async (client, _opts, args) => {
      const id = idArg(args[0], '<artifact>')
      const removed = await callShaped<{ artifact: string, freed_bytes: number }>(client, 'DELETE', `/v1/artifacts/${encodeURIComponent(id)}`, { artifact: 'string', freed_bytes: 'number' })
      return { json: removed, text: `removed ${removed.artifact}\n  ${removed.freed_bytes} bytes freed` }
    }))
}
