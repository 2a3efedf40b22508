/**
 * Typed output parts (protocols/artifact.md, artifact.schema.json): text,
 * data with a media type, and files named by the content id of an artifact.
 */
import { schema } from '../schema/validate.ts'

export interface TextPart { kind: 'text', text: string, media_type?: string }
export interface DataPart { kind: 'data', data: unknown, media_type?: string }
/** A reference to an artifact; the bytes travel over /aap/artifact, never in a signed event. */
export interface FilePart { kind: 'file', artifact: string, size: number, media_type: string, name?: string }
export type Part = TextPart | DataPart | FilePart

export const isPart = schema<Part>('aap:artifact#/definitions/Part')
export const isParts = schema<Part[]>('aap:artifact#/definitions/Parts')
export const isFilePart = schema<FilePart>('aap:artifact#/definitions/FilePart')

/** Bytes at once, or a stream of them read as they come. */
export type ArtifactSource = Uint8Array | AsyncIterable<Uint8Array>

/**
 * How an artifact is stored. `pin`: `'operator'` (the default) keeps it until it is removed on purpose (the
 * operator's uploads); `'run-output'` keeps it pinned only while run outputs stay within their share of the
 * store, ARTIFACT_RUN_OUTPUT_PIN_PERCENT (runs anyone allowed may start must not fill the store for good).
 */
export interface PutOptions { media_type: string, name?: string, pin?: 'operator' | 'run-output' }

/** What a run handler's `ctx.artifact` needs: store bytes, get the part that names them. */
export interface ArtifactWriter {
  put: (source: ArtifactSource, opts: PutOptions) => Promise<FilePart>
}

/** A payload's `parts`, when it has them, must be a list of Part: INVALID_REQUEST naming the first fault otherwise. */
export function checkParts (payload: Record<string, unknown>, what: string): void {
  if (payload.parts !== undefined) isParts.assert(payload.parts, `the ${what}'s parts`)
}
