/**
 * Cutting text to a bound without cutting a character in half.
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
