/**
 * How deep a JSON value nests. JSON.parse takes thousands of levels, but the
 * node's encoders recurse (JSON.stringify, the canonical form of a signed
 * record) and run out of stack a little further on, so values from outside
 * are held to a bound first (FRAME_JSON_MAX_DEPTH, PAYLOAD_MAX_DEPTH).
 */

/**
 * Whether `value` nests objects and arrays deeper than `max` levels (the
 * outermost object or array is level 1). It walks the value, never more
 * than `max` calls deep, and stops at the first member past the bound: about
 * a tenth of a microsecond for a delegation's frame, far less than a pass
 * over its bytes.
 */
export function nestedDeeperThan (value: unknown, max: number): boolean {
  if (typeof value !== 'object' || value === null) return false
  if (max <= 0) return true
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (nestedDeeperThan(value[i], max - 1)) return true
    return false
  }
  const record = value as Record<string, unknown>
  for (const k in record) if (nestedDeeperThan(record[k], max - 1)) return true
  return false
}
