/**
 * A request whose client may go away while the node works on it (a
 * delegation waits for the executor's answer): the signal aborts when the
 * request's connection ends or closes before `done` is called.
 *
 * The request's own 'close' is not it (it fires once its body has been read,
 * and a request is destroyed then too), and neither alone is the socket's
 * 'close': a client that gives up (fetch aborted) ends its side, and the
 * server ends its own at once (no half-open HTTP connections), so no answer
 * can be written any more, but the socket is not destroyed until the answer
 * is done with. A connection that outlives the request (keep-alive) is let go
 * of by `done`.
 */
import type { IncomingMessage } from 'node:http'

/** Why the signal of a request whose client went away aborts. */
export class ClientGoneError extends Error {
  constructor () {
    super('the API client went away before its answer was sent')
    this.name = 'ClientGoneError'
  }
}

export interface ClientWatch {
  /** Aborts when the client's connection ends or closes before `done`. */
  signal: AbortSignal
  /** The answer is ready: the connection ending from now on is not the client giving up. */
  done: () => void
}

export function watchClient (req: IncomingMessage): ClientWatch {
  const ctl = new AbortController()
  const socket = req.socket
  const gone = (): void => { ctl.abort(new ClientGoneError()) }
  const done = (): void => {
    socket.off('end', gone)
    socket.off('close', gone)
  }
  if (socket.destroyed || socket.readableEnded || socket.writableEnded) gone()
  else {
    socket.once('end', gone)
    socket.once('close', gone)
  }
  return { signal: ctl.signal, done }
}

/** `fn` with the signal of `req`'s client (aborts when it goes away); the connection is let go of once `fn` settled. */
export async function whileClientHere<T> (req: IncomingMessage, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const client = watchClient(req)
  try {
    return await fn(client.signal)
  } finally {
    client.done()
  }
}
