//! Redis key names: whatever bytes a key holds, in the compact format (the
//! default) the key is 30 bytes (34 with a sliding
//! log's suffix) of URL-safe base64 hashes around one hash tag; in the
//! packed format a fixed-size limit's key is its shard's hash (the shard
//! below the shard count, in the only hash tag) and the client is a
//! 15-character base64 field of it, named in its own keys (a sliding log)
//! after the same tag. No client byte reaches the key's structure.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tower_ratelimit::backend::{KeyFormat, RedisBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Limit, Quota};

type Backends = (tokio::runtime::Runtime, [RedisBackend; 2], Limit, Limit);

/// The packed backend's shards.
const SHARDS: u16 = 1000;

fn backend() -> &'static Backends {
    static BACKEND: OnceLock<Backends> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // Never connects: only key names are asked for.
        let backends = rt.block_on(async {
            let with = |format| {
                RedisBackend::builder("redis://127.0.0.1:1")
                    .key_format(format)
                    .connect_lazy()
                    .unwrap()
            };
            let packed = KeyFormat::Packed {
                shards: SHARDS.try_into().unwrap(),
            };
            [with(KeyFormat::default()), with(packed)]
        });
        let log = Limit::new("l", Algorithm::SlidingLog, Quota::per_second(1).unwrap()).unwrap();
        let gcra = Limit::new("g", Algorithm::Gcra, Quota::per_second(1).unwrap()).unwrap();
        (rt, backends, log, gcra)
    })
}

fuzz_target!(|data: &[u8]| {
    let (_, [compact, packed], limit, gcra) = backend();
    let split = data
        .first()
        .map_or(0, |&n| usize::from(n) % 8)
        .min(data.len());
    let namespace = String::from_utf8_lossy(&data[..split]).into_owned();
    let key = Key::new(&namespace, &data[split..]);
    let base64 = |part: &str| {
        part.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    for name in compact.redis_keys(&key, limit) {
        let (head, suffix) = name.split_at(30);
        assert!(suffix == ":log" || suffix == ":sum", "{name}");
        assert!(head.starts_with("rl:3{") && &head[20..21] == "}", "{name}");
        assert!(base64(&head[5..20]) && base64(&head[21..]), "{name}");
    }
    // The packed format: the tag `{<shard>}`, the shard below SHARDS;
    // after it, base64 only.
    let field = packed.redis_field(&key).unwrap();
    assert!(field.len() == 15 && base64(&field), "{field}");
    let shard_of = |name: &str| {
        let rest = name.strip_prefix("rl:4{").unwrap();
        let close = rest.find('}').unwrap();
        let shard: u16 = rest[..close].parse().unwrap();
        assert!(shard < SHARDS, "{name}");
        assert!(base64(&rest[close + 1..].replace(':', "")), "{name}");
        assert_eq!(name.matches('{').count(), 1, "{name}");
        shard
    };
    let hash = packed.redis_keys(&key, gcra);
    assert_eq!(hash.len(), 1);
    assert!(!hash[0].contains(&field), "{}", hash[0]);
    let shard = shard_of(&hash[0]);
    for name in packed.redis_keys(&key, limit) {
        assert_eq!(shard_of(&name), shard, "one slot a client: {name}");
        let tag = name.find('}').unwrap();
        assert!(name[tag + 1..].starts_with(&field), "{name}");
        assert!(name.ends_with(":log") || name.ends_with(":sum"), "{name}");
    }
});
