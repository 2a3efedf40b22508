/** A Map key for bytes: one char per byte (latin1), made natively, no encoding work. */
export function bytesKey (b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1')
}
