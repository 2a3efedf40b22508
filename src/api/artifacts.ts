/**
 * The API's artifact operations (protocols/api.openapi.json, putArtifact,
 * getArtifact, deleteArtifact and listArtifacts): bytes in and out as streams, never whole in memory. An
 * upload is cut into chunks as it arrives (src/artifacts/store.ts); a
 * download is fetched and verified into the store first when it is not here
 * (so every error comes before the first byte), then streamed from disk.
 */
import { Readable } from 'node:stream'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { MeshNode } from '../node.ts'

type Query = Record<string, unknown>

const DEFAULT_MEDIA_TYPE = 'application/octet-stream'

export interface ArtifactHandlers {
  putArtifact: { json: (req: FastifyRequest) => Promise<{ status?: number, body: unknown }> }
  getArtifact: { stream: (req: FastifyRequest, reply: FastifyReply) => Promise<void> }
  deleteArtifact: { json: (req: FastifyRequest) => Promise<{ status?: number, body: unknown }> }
  listArtifacts: { json: (req: FastifyRequest) => Promise<{ status?: number, body: unknown }> }
}

export function artifactHandlers (node: MeshNode): ArtifactHandlers {
  return {
    putArtifact: {
      json: async (req) => {
        const q = req.query as Query
        const type = req.headers['content-type']
        const part = await node.artifacts.put(req.raw, {
          media_type: typeof type === 'string' && type !== '' ? type : DEFAULT_MEDIA_TYPE,
          ...(typeof q.name === 'string' ? { name: q.name } : {}),
          // an agent on the work stream uploading a run's output keeps it within the run outputs' share
          ...(q.pin === 'run-output' ? { pin: 'run-output' as const } : {})
        })
        return { status: 201, body: { part } }
      }
    },
    getArtifact: {
      stream: async (req, reply) => {
        const id = (req.params as Record<string, string>).artifact ?? ''
        const q = req.query as Query
        const from = Array.isArray(q.from) ? q.from.filter((x): x is string => typeof x === 'string') : []
        const gone = new AbortController()
        const onGone = (): void => { gone.abort(new Error('the API client went away')) }
        req.raw.once('close', onGone)
        try {
          const { manifest, chunks } = await node.artifacts.open(id, { holders: from, signal: gone.signal })
          void reply
            .code(200)
            .header('content-type', typeof q.media_type === 'string' ? q.media_type : DEFAULT_MEDIA_TYPE)
            .header('content-length', String(manifest.size))
            // bytes any peer may have written, typed by the caller: a download, never a page of the API's origin
            .header('content-disposition', 'attachment')
            .header('x-content-type-options', 'nosniff')
            .header('content-security-policy', "default-src 'none'; sandbox")
          await reply.send(Readable.from(chunks, { objectMode: false }))
        } finally {
          req.raw.off('close', onGone)
        }
      }
    },
    deleteArtifact: {
      json: async (req) => ({ body: await node.artifacts.remove((req.params as Record<string, string>).artifact ?? '') })
    },
    listArtifacts: {
      json: async (req) => {
        const q = req.query as Query
        return { body: node.artifacts.list({ ...(typeof q.limit === 'number' ? { limit: q.limit } : {}), ...(typeof q.cursor === 'string' ? { cursor: q.cursor } : {}) }) }
      }
    }
  }
}

/** Register routes in a scope whose bodies are not parsed: the handler reads `req.raw` as a stream. */
export function rawBodyScope (app: FastifyInstance, register: (scope: FastifyInstance) => void): void {
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', (_req, _payload, done) => { done(null) })
    register(scope)
  })
}
