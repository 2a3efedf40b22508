/**
 * The ciphers of the Noise channel, as @chainsafe/libp2p-noise has them by
 * default, except that a decrypted message gets buffer of its own.
 *
 * By default Noise decrypts a small message in place, inside the buffer the
 * socket read it into: a TCP read is a 64 KiB buffer, so every byte range
 * cut from the plaintext (a peer id in a DHT answer, a multiaddr from
 * identify, a gossip message id) kept by the peer store, the routing table
 * or a connection keeps the whole 64 KiB read alive. A heap snapshot of a
 * simulation process at 200 nodes held 142 MiB of such reads for 43 nodes
 * (docs/scaling.md), several MiB per node. Decrypting into a buffer the size
 * of the message costs one small allocation per message and lets each read
 * go as soon as it is decrypted.
 */
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto'
import type { ICryptoInterface } from '@chainsafe/libp2p-noise'

export const ownedPlaintextCrypto: ICryptoInterface = {
  ...defaultCrypto,
  // no destination: the cipher allocates the plaintext (the default reuses the ciphertext's bytes)
  chaCha20Poly1305Decrypt: (ciphertext, nonce, ad, k) => defaultCrypto.chaCha20Poly1305Decrypt(ciphertext, nonce, ad, k)
}
