/**
 * Cutting text to a bound without cutting a character in half, and making
 * text from the network safe to print on a terminal.
 */

/**
 * `text` made well formed (a lone surrogate becomes U+FFFD) and cut to at
 * most `max` UTF-16 code units, never between the two units of a surrogate
 * pair: a lone surrogate is not a character, RFC 8785 (the canonical form of
 * signed records) leaves such strings out, and a strict verifier elsewhere
 * would refuse the event that carried one.
 */
export function cutText (text: string, max: number): string {
  const whole = text.toWellFormed()
  if (whole.length <= max) return whole
  const last = whole.charCodeAt(max - 1)
  return whole.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max)
}

/**
 * C0 and C1 controls, DEL, the bidi controls that reorder text (U+061C,
 * U+200E-U+200F, U+202A-U+202E, U+2066-U+2069), the zero-width characters
 * that hide text, the line and paragraph separators, and the BOM.
 */
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g

/**
 * One line of text for a terminal. A peer's card, a run's failure or block
 * reason, an executor's error message may hold escape sequences that retitle
 * the window, clear the screen, move the cursor over earlier lines or reorder
 * what follows: line breaks and tabs become spaces (a string cannot start a
 * line of its own), every other control a visible `\u{…}`.
 */
export function printable (text: string): string {
  return text.replace(CONTROLS, c => c === '\n' || c === '\r' || c === '\t' ? ' ' : `\\u{${c.charCodeAt(0).toString(16)}}`)
}
