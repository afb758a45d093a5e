//! [`KeyHash`]: the hash that places a key in the memory backend: SipHash-1-3
//! under a secret key, as std's `HashMap` hashes, written out for the one
//! short write a key is.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// SipHash-1-3 (Aumasson and Bernstein's SipHash with one compression round
/// a word and three finalization rounds, what std's `RandomState` builds)
/// of a key's bytes under a key of 128 secret bits.
///
/// Clients choose keys, and a key's hash picks its shard and is its
/// fingerprint in the shard's table, so it must be keyed: nobody who does
/// not know the secret can make two keys collide or crowd one shard.
/// Written out rather than through std's hasher, whose general `write`
/// (any number of writes of any length) and finish cost a decision about
/// 15 instructions more than one write of a few bytes needs; the tests
/// hold it to std's hasher word for word.
pub(crate) struct KeyHash {
    k0: u64,
    k1: u64,
}

impl KeyHash {
    /// Under a secret drawn from std's own randomness (std gives no access
    /// to a `RandomState`'s keys; two of its hashes are words nobody can
    /// predict).
    pub(crate) fn new() -> Self {
        let random = RandomState::new();
        Self::with_secret(random.hash_one(0u64), random.hash_one(1u64))
    }

    fn with_secret(k0: u64, k1: u64) -> Self {
        Self { k0, k1 }
    }

    /// The hash of `bytes`.
    #[inline]
    pub(crate) fn of(&self, bytes: &[u8]) -> u64 {
        let mut v = [
            self.k0 ^ 0x736f_6d65_7073_6575,
            self.k1 ^ 0x646f_7261_6e64_6f6d,
            self.k0 ^ 0x6c79_6765_6e65_7261,
            self.k1 ^ 0x7465_6462_7974_6573,
        ];
        let (words, rest) = bytes.as_chunks::<8>();
        for word in words {
            compress(&mut v, u64::from_le_bytes(*word));
        }
        // The last word: what is left, and the length's low byte on top.
        compress(&mut v, (bytes.len() as u64) << 56 | tail(rest));
        v[2] ^= 0xff;
        for _ in 0..3 {
            round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

/// One word into the state: SipHash's compression, one round.
#[inline(always)]
fn compress(v: &mut [u64; 4], word: u64) {
    v[3] ^= word;
    round(v);
    v[0] ^= word;
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// Up to seven bytes as a little-endian word, read in at most three loads.
#[inline(always)]
fn tail(rest: &[u8]) -> u64 {
    let mut word = 0;
    let mut at = 0;
    if let Some((four, _)) = rest.split_first_chunk::<4>() {
        word = u64::from(u32::from_le_bytes(*four));
        at = 4;
    }
    if let Some((two, _)) = rest[at..].split_first_chunk::<2>() {
        word |= u64::from(u16::from_le_bytes(*two)) << (8 * at);
        at += 2;
    }
    if let Some(&one) = rest.get(at) {
        word |= u64::from(one) << (8 * at);
    }
    word
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::Hasher;

    use super::*;

    /// std's SipHash-1-3 (`DefaultHasher::new()` is it under the secret
    /// 0, 0) of `bytes` in one write.
    fn std_hash(bytes: &[u8]) -> u64 {
        let mut hasher = DefaultHasher::new();
        hasher.write(bytes);
        hasher.finish()
    }

    #[test]
    fn hashes_as_std_does_at_every_length() {
        let ours = KeyHash::with_secret(0, 0);
        let mut random = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..=300 {
            for _ in 0..4 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        random ^= random << 13;
                        random ^= random >> 7;
                        random ^= random << 17;
                        random as u8
                    })
                    .collect();
                assert_eq!(ours.of(&bytes), std_hash(&bytes), "{len} bytes: {bytes:?}");
            }
        }
    }

    #[test]
    fn the_secret_changes_every_hash() {
        let key = b"\x02ip\x7f\x00\x00\x01";
        let hashes = [
            KeyHash::with_secret(0, 0).of(key),
            KeyHash::with_secret(1, 0).of(key),
            KeyHash::with_secret(0, 1).of(key),
            KeyHash::new().of(key),
            KeyHash::new().of(key),
        ];
        for (i, a) in hashes.iter().enumerate() {
            for b in &hashes[i + 1..] {
                assert_ne!(a, b, "{hashes:x?}");
            }
        }
    }
}
