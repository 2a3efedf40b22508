/**
 * Reads where a missing key is an answer, not a failure. Anything else the
 * datastore throws (a closed or broken store) reaches the caller.
 */
import type { Datastore, Key } from 'interface-datastore'

function isNotFound (err: unknown): boolean {
  return err instanceof Error && err.name === 'NotFoundError'
}

/** The value under `key`, or undefined when there is none. */
export async function readOptional (ds: Pick<Datastore, 'get'>, key: Key): Promise<Uint8Array | undefined> {
  try {
    return await ds.get(key)
  } catch (err) {
    if (isNotFound(err)) return undefined
    throw err
  }
}

const dec = new TextDecoder()

/** The JSON value under `key`, or undefined when there is none. */
export async function readJson<T> (ds: Pick<Datastore, 'get'>, key: Key): Promise<T | undefined> {
  const bytes = await readOptional(ds, key)
  return bytes === undefined ? undefined : JSON.parse(dec.decode(bytes)) as T
}
