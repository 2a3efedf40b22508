// Server-sent events read with fetch, for the node's browser view: EventSource
// cannot send headers, and every call of the view carries its session's secret
// in one. Reconnects as EventSource does.

/** An event stream that ended is opened again after this long (what EventSource would do). */
const STREAM_RETRY_MS = 3000
/** An event stream line longer than this ends the stream (it is opened again). */
const STREAM_LINE_MAX = 8 * 1024 * 1024

/**
 * Follow a server-sent-events stream with fetch (EventSource cannot send the
 * session's secret header): `on(type, data)` for each event, `onDown()` when
 * it ends; it is opened again after STREAM_RETRY_MS until closed, or until
 * the API answers 401 (then `onRefused()`). `headers` is sent with each try.
 */
export function follow (path, headers, on, onDown, onRefused) {
  const ctl = new AbortController()
  const run = async () => {
    while (!ctl.signal.aborted) {
      try {
        const res = await fetch(path, { headers: { ...headers, accept: 'text/event-stream' }, credentials: 'same-origin', signal: ctl.signal })
        if (res.status === 401) {
          onRefused()
          return
        }
        if (res.ok && res.body !== null) await readEvents(res.body, on)
      } catch (err) {
        if (!ctl.signal.aborted) console.debug('event stream ended:', err.message)
      }
      if (ctl.signal.aborted) return
      onDown()
      await new Promise(resolve => setTimeout(resolve, STREAM_RETRY_MS))
    }
  }
  void run()
  return { close: () => ctl.abort() }
}

/** Read SSE from `body` until it ends, calling `on(type, data)` per event. */
async function readEvents (body, on) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader()
  let buf = ''
  let type = 'message'
  let data = null
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buf += value
    let nl
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '')
      buf = buf.slice(nl + 1)
      if (line === '') {
        if (data !== null) on(type, data)
        type = 'message'
        data = null
        continue
      }
      if (line.startsWith(':')) continue
      const colon = line.indexOf(':')
      const field = colon < 0 ? line : line.slice(0, colon)
      const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '')
      if (field === 'event') type = val
      else if (field === 'data') data = data === null ? val : `${data}\n${val}`
    }
    if (buf.length > STREAM_LINE_MAX) throw new Error('an event stream line over STREAM_LINE_MAX')
  }
}
