/**
 * Text from the network made safe for a terminal (util/text.ts printable).
 * --json output needs none of this: JSON.stringify escapes the controls a
 * parser cares for.
 */
import { printable } from '../util/text.ts'

export { printable }

/**
 * Lines the command composed, each made printable: what a command wrote
 * itself keeps its line breaks, a string from the network inside a line keeps
 * none of its controls (the last guard: format.ts cleans each field already).
 */
export function printableLines (text: string): string {
  return text.split('\n').map(printable).join('\n')
}
