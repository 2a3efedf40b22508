/**
 * The metrics port on loopback answers only requests that name it in their Host header.
 * Found by session 49's review: it served the node's counters to any Host,
 * so a web page whose own name was made to resolve to 127.0.0.1 (DNS
 * rebinding) could read them through the browser of the node's operator.
 * The API's view refuses such requests; the metrics port now does too, with
 * the API's typed error.
 */
import { request } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { NodeMetrics, serveMetrics } from '../src/api/metrics.ts'

/** GET `url` with the Host header `host`: the status, the content type and the body. */
async function get (url: string, host: string): Promise<{ status: number, type: string, body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { host } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { body += chunk })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }) })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

describe('the metrics port and the Host header', () => {
  const metrics = new NodeMetrics()
  let served: Awaited<ReturnType<typeof serveMetrics>>
  let port: string

  beforeAll(async () => {
    served = await serveMetrics(metrics, '127.0.0.1', 0)
    port = new URL(served.url).port
  })
  afterAll(async () => { await served.close() })

  it('serves the counters to a request that names the server', async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`]) {
      const res = await get(served.url, host)
      expect(res.status, host).toBe(200)
      expect(res.body, host).toMatch(/^# HELP aap_/m)
    }
  })

  it('refuses a foreign Host, with or without the port, with a typed error and no counters', async () => {
    for (const host of ['evil.example', `evil.example:${port}`, `127.0.0.1.evil.example:${port}`, `localhost:${Number(port) + 1}`]) {
      const res = await get(served.url, host)
      expect(res.status, host).toBe(403)
      expect(res.type, host).toMatch(/^application\/json/)
      const body = JSON.parse(res.body) as { error: { code: string, message: string, details: unknown } }
      expect(body.error.code, host).toBe('UNAUTHORIZED')
      expect(body.error.details, host).toEqual({ reason: 'host' })
      expect(res.body, host).not.toContain('aap_')
    }
    // the refusals are counted
    const text = await metrics.text()
    expect(text).toMatch(/^aap_errors_total\{code="UNAUTHORIZED",source="metrics"\} 4$/m)
  })
})

describe('the metrics port on a wildcard address, for scrapers on other machines', () => {
  const metrics = new NodeMetrics()
  let served: Awaited<ReturnType<typeof serveMetrics>>
  let url: string

  beforeAll(async () => {
    served = await serveMetrics(metrics, '0.0.0.0', 0)
    // the test reaches it on loopback, as a remote scraper reaches it on the machine's address
    url = `http://127.0.0.1:${new URL(served.url).port}/metrics`
  })
  afterAll(async () => { await served.close() })

  // session 52's review: the check refused every such scrape (403), so monitoring went dark
  it('serves a scrape that names the node by DNS or through a port mapping', async () => {
    for (const host of [`node1.internal:${new URL(url).port}`, '10.0.0.5:19464']) {
      const res = await get(url, host)
      expect(res.status, host).toBe(200)
      expect(res.body, host).toMatch(/^# HELP aap_/m)
    }
  })
})
