/**
 * Cutting text to a bound without cutting a character in half.
 */

/**
 * `text` cut to at most `max` UTF-16 code units, never between the two units
 * of a surrogate pair: a lone surrogate is not a character, RFC 8785 (the
 * canonical form of signed records) leaves such strings out, and a strict
 * verifier elsewhere would refuse the event that carried one.
 */
export function cutText (text: string, max: number): string {
  if (text.length <= max) return text
  const last = text.charCodeAt(max - 1)
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max)
}
