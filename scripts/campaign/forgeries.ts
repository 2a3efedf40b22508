import type { PartResult } from './report.ts'
export async function runForgeries (o: { perKind: number, seed: number }): Promise<PartResult> {
  return { name: 'forgeries', title: 'x', built: true, ran: true, error: `todo ${o.perKind}` }
}
