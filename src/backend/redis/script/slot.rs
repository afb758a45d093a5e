//! Which Redis Cluster slot a key is in: what the cluster's nodes, the
//! batches and a fleet's messages all route by.

/// Slots in a Redis Cluster.
pub(in crate::backend::redis) const SLOTS: usize = 16_384;

/// The cluster slot of a Redis key: CRC16 of its hash tag (what is between
/// the first `{` and the next `}`, when not empty), else of the whole key.
pub(in crate::backend::redis) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// CRC-16/XMODEM, the one Redis Cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::{crc16, slot};

    #[test]
    fn slots_are_redis_clusters() {
        // The CRC: the check value of CRC-16/XMODEM, and CLUSTER KEYSLOT foo.
        assert_eq!(slot(b"123456789"), 12_739);
        assert_eq!(slot(b"foo"), 12_182);
        // The hash tag, by the cluster specification's own examples: the
        // text between the first `{` and the first `}` after it, unless
        // that is empty, when the whole key is hashed.
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16_384);
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{bar"), crc16(b"foo{bar") % 16_384);
    }
}
