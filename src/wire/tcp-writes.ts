/**
 * One write to the kernel per send of a TCP connection, not one per chunk.
 *
 * libp2p's TCP connection writes each chunk of what it is given to the socket
 * on its own, and what it is given is a list of chunks: each Noise frame's
 * length and its ciphertext, for every yamux frame queued since the last send.
 * Node writes each chunk at once when the socket can take it, so a send was
 * several system calls (in a 100-node events benchmark, `writeBuffer` was the
 * largest single cost of a subscriber process, 10 % of its CPU). Corking the
 * socket for the send hands Node every chunk at once, and it writes them with
 * one `writev`. The bytes, their order and the back-pressure signal (the last
 * write's answer) are what they were.
 *
 * libp2p's TCP connection class is not exported, so the patch goes on the
 * prototype of the first connection that has a corkable socket; a connection
 * of another kind (memory, WebSockets) is left as it is.
 */

interface Corkable { cork: () => void, uncork: () => void }
interface TcpConnection { socket?: unknown, sendData?: (data: Iterable<Uint8Array> & { bufs?: unknown[] }) => unknown }

const patched = new WeakSet<object>()

function corkable (socket: unknown): socket is Corkable {
  return typeof socket === 'object' && socket !== null && typeof (socket as Partial<Corkable>).cork === 'function' && typeof (socket as Partial<Corkable>).uncork === 'function'
}

/** Make sends of connections like `maConn` (a libp2p TCP connection) one write each. True when they are (now or already). */
export function coalesceTcpWrites (maConn: unknown): boolean {
  if (typeof maConn !== 'object' || maConn === null) return false
  const proto: unknown = Object.getPrototypeOf(maConn)
  if (typeof proto !== 'object' || proto === null) return false
  if (patched.has(proto)) return true
  const send = (proto as TcpConnection).sendData
  if (typeof send !== 'function' || !corkable((maConn as TcpConnection).socket)) return false
  ;(proto as TcpConnection).sendData = function (this: TcpConnection, data) {
    const socket = this.socket
    if (!corkable(socket) || (Array.isArray(data.bufs) && data.bufs.length < 2)) return send.call(this, data)
    socket.cork()
    try {
      return send.call(this, data)
    } finally {
      socket.uncork()
    }
  }
  patched.add(proto)
  return true
}
