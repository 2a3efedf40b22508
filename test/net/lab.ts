/**
 * A small "internet" of Linux network namespaces, made and removed by the
 * tests themselves (they run as root, here and on CI):
 *
 *   - one namespace holds the internet: a bridge every public host and every
 *     NAT router plugs into with a veth pair (WAN_NET, see below);
 *   - a public host is a namespace with one veth on that bridge;
 *   - a NAT router is a namespace with a WAN leg on the bridge, a LAN bridge
 *     of its own (a 198.18.0.0/15 subnet) and nftables masquerade; the hosts
 *     behind it route through it and are unreachable from outside;
 *   - netem adds delay and loss where the kernel has it (not every kernel does:
 *     `delay()` says whether it could).
 *
 * Every namespace is named `aapnet-<pid>-<name>`, so a later run removes what
 * a killed run left behind (its pid no longer lives), and `destroy()` runs in
 * afterAll whatever the tests did.
 *
 * Addresses. libp2p treats the RFC test ranges (198.18.0.0/15, 192.0.2.0/24,
 * ...) as private: AutoNAT does not verify them and DCUtR does not punch to
 * them, so a WAN in one of them could never look public. The WAN therefore
 * uses WAN_NET, a range libp2p sees as public, but it exists only inside these
 * namespaces: no namespace has a link to the machine's own network, and every
 * host's nftables output chain drops anything not addressed to the lab's own
 * ranges (or loopback), so nothing can leave even by mistake.
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

const run = promisify(execFile)

/** The lab's WAN (only inside its namespaces; see the header). */
export const WAN_NET = '11.99.0'
/** NAT LANs: 198.18.<n>.0/24. */
export const LAN_NET = '198.18'
const NS_PREFIX = 'aapnet-'
const EXEC_TIMEOUT_MS = 30_000

export async function sh (cmd: string, args: string[], input?: string): Promise<string> {
  if (input !== undefined) {
    return new Promise((resolve, reject) => {
      const child = execFile(cmd, args, { timeout: EXEC_TIMEOUT_MS }, (err, stdout, stderr) => {
        if (err !== null) reject(new Error(`${cmd} ${args.join(' ')}: ${stderr || err.message}`))
        else resolve(stdout)
      })
      child.stdin?.end(input)
    })
  }
  try {
    const { stdout } = await run(cmd, args, { timeout: EXEC_TIMEOUT_MS })
    return stdout
  } catch (err) {
    const e = err as { stderr?: string, message: string }
    throw new Error(`${cmd} ${args.join(' ')}: ${e.stderr ?? e.message}`)
  }
}

async function has (cmd: string): Promise<boolean> {
  try {
    await run('sh', ['-c', `command -v ${cmd}`])
    return true
  } catch {
    return false
  }
}

/** iproute2 and nftables from Debian packages when missing (apt-get update once). */
export async function ensureTools (): Promise<void> {
  const missing: string[] = []
  if (!(await has('ip')) || !(await has('tc'))) missing.push('iproute2')
  if (!(await has('nft'))) missing.push('nftables')
  if (missing.length === 0) return
  await sh('apt-get', ['update', '-qq'])
  await sh('apt-get', ['install', '-y', '-qq', ...missing])
}

/** Remove namespaces of earlier runs whose process is gone. */
export async function removeStale (): Promise<string[]> {
  const removed: string[] = []
  for (const line of (await sh('ip', ['netns', 'list'])).split('\n')) {
    const name = line.split(' ')[0] ?? ''
    const m = new RegExp(`^${NS_PREFIX}(\\d+)-`).exec(name)
    if (m === null) continue
    const pid = Number(m[1])
    let alive = true
    try { process.kill(pid, 0) } catch { alive = false }
    if (alive && pid !== process.pid) continue
    await sh('ip', ['netns', 'del', name])
    removed.push(name)
  }
  return removed
}

export interface Host {
  name: string
  ns: string
  /** The host's own address. */
  ip: string
  /** How the rest of the internet sees it: its own IP, or its router's WAN IP. */
  wanIp: string
  router?: Router
}

export interface Router {
  name: string
  ns: string
  wanIp: string
  lan: number
  hosts: number
}

export class Lab {
  readonly id = `${NS_PREFIX}${process.pid}-`
  readonly inet: string
  private readonly namespaces: string[] = []
  private nextWan = 10
  readonly hosts = new Map<string, Host>()

  private constructor () {
    this.inet = `${this.id}inet`
  }

  static async create (): Promise<Lab> {
    await ensureTools()
    await removeStale()
    const lab = new Lab()
    await lab.addNs(lab.inet)
    await lab.ip(lab.inet, 'link', 'add', 'br0', 'type', 'bridge')
    await lab.ip(lab.inet, 'link', 'set', 'br0', 'up')
    return lab
  }

  private async addNs (ns: string): Promise<void> {
    await sh('ip', ['netns', 'add', ns])
    this.namespaces.push(ns)
    await this.ip(ns, 'link', 'set', 'lo', 'up')
  }

  async ip (ns: string, ...args: string[]): Promise<string> {
    return sh('ip', ['-n', ns, ...args])
  }

  async exec (ns: string, ...args: string[]): Promise<string> {
    return sh('ip', ['netns', 'exec', ns, ...args])
  }

  async nft (ns: string, script: string): Promise<void> {
    await sh('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], script)
  }

  /** A veth from the internet bridge (or a router's LAN bridge) into `ns`, named eth0 there. */
  private async plug (bridgeNs: string, bridge: string, port: string, ns: string, ifname: string, cidr: string): Promise<void> {
    await this.ip(bridgeNs, 'link', 'add', port, 'type', 'veth', 'peer', 'name', ifname, 'netns', ns)
    await this.ip(bridgeNs, 'link', 'set', port, 'master', bridge)
    await this.ip(bridgeNs, 'link', 'set', port, 'up')
    await this.ip(ns, 'addr', 'add', cidr, 'dev', ifname)
    await this.ip(ns, 'link', 'set', ifname, 'up')
  }

  /** Nothing leaves a host for an address outside the lab. */
  private async guard (ns: string): Promise<void> {
    await this.nft(ns, `table inet aapguard {
  chain partition_out {
  }
  chain partition_in {
  }
  chain output {
    type filter hook output priority 0; policy drop;
    oifname "lo" accept
    jump partition_out
    ip daddr { ${WAN_NET}.0/24, ${LAN_NET}.0.0/15 } accept
  }
  chain input {
    type filter hook input priority 0; policy accept;
    jump partition_in
  }
}
`)
  }

  async publicHost (name: string): Promise<Host> {
    const ns = `${this.id}${name}`
    await this.addNs(ns)
    const ip = `${WAN_NET}.${this.nextWan++}`
    await this.plug(this.inet, 'br0', `v-${name}`.slice(0, 15), ns, 'eth0', `${ip}/24`)
    await this.guard(ns)
    const h: Host = { name, ns, ip, wanIp: ip }
    this.hosts.set(name, h)
    return h
  }

  async router (name: string, lan: number): Promise<Router> {
    const ns = `${this.id}${name}`
    await this.addNs(ns)
    const wanIp = `${WAN_NET}.${this.nextWan++}`
    await this.plug(this.inet, 'br0', `v-${name}`.slice(0, 15), ns, 'wan', `${wanIp}/24`)
    await this.ip(ns, 'link', 'add', 'lan', 'type', 'bridge')
    await this.ip(ns, 'addr', 'add', `${LAN_NET}.${lan}.1/24`, 'dev', 'lan')
    await this.ip(ns, 'link', 'set', 'lan', 'up')
    await this.exec(ns, 'sysctl', '-qw', 'net.ipv4.ip_forward=1')
    // a home router: LAN hosts go out masqueraded, nothing from the WAN comes in unasked
    await this.nft(ns, `table ip nat {
  chain postrouting {
    type nat hook postrouting priority 100;
    oifname "wan" masquerade
  }
}
table inet filter {
  chain forward {
    type filter hook forward priority 0; policy drop;
    iifname "lan" oifname "wan" accept
    ct state established,related accept
  }
}
`)
    return { name, ns, wanIp, lan, hosts: 0 }
  }

  async natHost (name: string, router: Router): Promise<Host> {
    const ns = `${this.id}${name}`
    await this.addNs(ns)
    const ip = `${LAN_NET}.${router.lan}.${10 + router.hosts++}`
    await this.plug(router.ns, 'lan', `l-${name}`.slice(0, 15), ns, 'eth0', `${ip}/24`)
    await this.ip(ns, 'route', 'add', 'default', 'via', `${LAN_NET}.${router.lan}.1`)
    await this.guard(ns)
    const h: Host = { name, ns, ip, wanIp: router.wanIp, router }
    this.hosts.set(name, h)
    return h
  }

  /**
   * netem delay (and loss) on every host's and router's link to the internet,
   * so each one-way hop gets `oneWayMs`. False when this kernel has no netem
   * (CONFIG_NET_SCH_NETEM unset): nothing is changed then.
   */
  async delay (oneWayMs: number, lossPercent = 0): Promise<boolean> {
    const ports = (await this.ip(this.inet, '-o', 'link', 'show', 'master', 'br0')).split('\n')
      .map(l => /^\d+: ([^@:]+)/.exec(l)?.[1]).filter((p): p is string => p !== undefined)
    for (const port of ports) {
      try {
        await sh('ip', ['netns', 'exec', this.inet, 'tc', 'qdisc', 'replace', 'dev', port, 'root', 'netem', 'delay', `${oneWayMs}ms`,
          ...(lossPercent > 0 ? ['loss', `${lossPercent}%`] : [])])
      } catch (err) {
        if (/unknown|not supported|No such file/i.test((err as Error).message)) return false
        throw err
      }
    }
    return true
  }

  /**
   * Cut the lab in two: each host drops what it sends to, and what it gets
   * from, the other group's addresses (a NATed host is seen as its router).
   */
  async partition (a: Host[], b: Host[]): Promise<void> {
    const cut = async (side: Host[], other: Host[]): Promise<void> => {
      const addrs = [...new Set(other.map(h => h.wanIp).filter(ip => !side.some(s => s.wanIp === ip)))]
      for (const h of side) {
        await this.nft(h.ns, `add rule inet aapguard partition_out ip daddr { ${addrs.join(', ')} } drop
add rule inet aapguard partition_in ip saddr { ${addrs.join(', ')} } drop
`)
      }
    }
    await cut(a, b)
    await cut(b, a)
  }

  async heal (hosts: Host[]): Promise<void> {
    for (const h of hosts) await this.nft(h.ns, 'flush chain inet aapguard partition_out\nflush chain inet aapguard partition_in\n')
  }

  /** Remove every namespace of this lab (their veths and bridges go with them). */
  async destroy (): Promise<void> {
    const errors: string[] = []
    for (const ns of this.namespaces.reverse()) {
      try { await sh('ip', ['netns', 'del', ns]) } catch (err) { errors.push((err as Error).message) }
    }
    this.namespaces.length = 0
    if (errors.length > 0) throw new Error(`lab cleanup: ${errors.join('; ')}`)
  }
}
