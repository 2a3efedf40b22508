/**
 * Text from the network made safe for a terminal. A peer's card, a run's
 * failure or block reason, an executor's error message: any of them may hold
 * escape sequences that retitle the window, clear the screen, move the cursor
 * over earlier lines or reorder what follows (bidi controls). --json output
 * needs none of this: JSON.stringify escapes the controls a parser cares for.
 */

/**
 * C0 and C1 controls, DEL, the bidi controls that reorder text (U+061C,
 * U+200E-U+200F, U+202A-U+202E, U+2066-U+2069), the zero-width characters
 * that hide text, the line and paragraph separators, and the BOM.
 */
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g

/**
 * One line of text for the terminal: line breaks and tabs become spaces (a
 * string cannot start a line of its own that looks like the command's), every
 * other control a visible `\u{…}`.
 */
export function printable (text: string): string {
  return text.replace(CONTROLS, c => c === '\n' || c === '\r' || c === '\t' ? ' ' : `\\u{${c.charCodeAt(0).toString(16)}}`)
}

/**
 * Lines the command composed, each made printable: what a command wrote
 * itself keeps its line breaks, a string from the network inside a line keeps
 * none of its controls (the last guard: format.ts cleans each field already).
 */
export function printableLines (text: string): string {
  return text.split('\n').map(printable).join('\n')
}
