/**
 * Limits of the identity layer (keys and agent ids).
 */

/**
 * Agent ids a process keeps parsed (identity.ts peerIdOfAgent): each parse is
 * a base58 decode, a protobuf decode and a re-encoding to check the id is its
 * key's one encoding. Enough for every peer and run a node deals with at once.
 */
export const AGENT_ID_CACHE_ENTRIES = 8192
