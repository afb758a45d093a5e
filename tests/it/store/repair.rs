//! A decision its keys fail: only what the keys themselves show to be wrong
//! is deleted, on every key that client's decision read and no other; a
//! fault the keys do not explain is the store's. Each as the
//! least-privileged ACL user (no `TYPE`), in both key formats.
#![cfg(feature = "redis")]

use std::time::Duration;

use tower_ratelimit::backend::{Backend, Cause, KeyFormat, RedisBackend, StoreHealth};
use tower_ratelimit::key::Key;
use tower_ratelimit::policy::PenaltyBox;
use tower_ratelimit::{Algorithm, Policy};

use crate::support::proxy::Proxy;
use crate::support::{RedisServer, AGREE};

/// 3 a minute, and a penalty box: 10 denials within a minute ban for 5
/// minutes.
fn policy() -> Policy {
    Policy::builder()
        .limit("api", Algorithm::SlidingWindow, "3/min".parse().unwrap())
        .penalty(PenaltyBox::new(10, Duration::from_secs(60), Duration::from_secs(300)).unwrap())
        .build()
        .unwrap()
}

async fn limiter(server: &RedisServer, format: KeyFormat) -> RedisBackend {
    RedisBackend::builder(&server.limiter_url())
        .timeout(AGREE)
        .key_format(format)
        .connect()
        .await
        .unwrap()
}

/// The keys under the server that end with `suffix`.
fn keys_ending(server: &RedisServer, suffix: &str) -> Vec<String> {
    let pattern = format!("*{suffix}");
    server
        .cli(&["--scan", "--pattern", &pattern])
        .lines()
        .map(str::to_owned)
        .filter(|k| !k.is_empty())
        .collect()
}

/// How many times Redis ran `command` (from a script or not).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A penalty box's strikes key made a list: each refusal failed as the
/// key's trouble, the repair reset the limit's keys and never the
/// strikes', and the client's budget started over on every refusal (100
/// of 100 on a 30/min limit). Now the strikes key is mended and the budget
/// kept: after its 3, the client is refused, whatever it sends.
#[tokio::test]
async fn a_poisoned_penalty_key_leaves_its_client_limited() {
    for format in [KeyFormat::default(), KeyFormat::PACKED] {
        let server = RedisServer::start();
        let redis = limiter(&server, format).await;
        let (policy, client) = (policy(), Key::new("user", "mallory"));
        for _ in 0..3 {
            assert!(redis.check(&client, &policy, 1).await.unwrap().is_allowed());
        }
        // A refusal counts a strike: its key now exists. Poisoned.
        assert!(!redis.check(&client, &policy, 1).await.unwrap().is_allowed());
        let strikes = keys_ending(&server, ":strikes");
        assert_eq!(strikes.len(), 1, "{format:?}: {strikes:?}");
        server.cli(&["DEL", &strikes[0]]);
        server.cli(&["LPUSH", &strikes[0], "x"]);
        let (mut admitted, mut failed) = (0, 0);
        for _ in 0..100 {
            match redis.check(&client, &policy, 1).await {
                Ok(decision) => admitted += usize::from(decision.is_allowed()),
                Err(e) => {
                    assert_eq!(e.cause(), Cause::KeyState, "{format:?}: {e}");
                    failed += 1;
                }
            }
        }
        assert_eq!((admitted, failed), (0, 1), "{format:?}: admitted, failed");
        assert_eq!(redis.health(), StoreHealth::Deciding);
    }
}

/// Under the packed format, clients share a hash per shard. A client whose
/// own penalty key was poisoned once deleted the whole shared hash (the
/// repair asked `TYPE`, which the least-privileged user may not, and took
/// the refusal for another type): 20 of 20 bystanders went from refused to
/// admitted. Now the shared hash is touched only if it is no hash.
#[tokio::test]
async fn a_poisoned_client_leaves_the_hash_it_shares_alone() {
    let server = RedisServer::start();
    let format = KeyFormat::Packed {
        shards: std::num::NonZeroU16::new(1).unwrap(),
    };
    let redis = limiter(&server, format).await;
    let policy = policy();
    let bystanders: Vec<Key> = (0..20).map(|i| Key::new("user", format!("b{i}"))).collect();
    for bystander in &bystanders {
        for _ in 0..3 {
            assert!(redis
                .check(bystander, &policy, 1)
                .await
                .unwrap()
                .is_allowed());
        }
    }
    let mallory = Key::new("user", "mallory");
    for _ in 0..4 {
        let _ = redis.check(&mallory, &policy, 1).await.unwrap();
    }
    // Only a refused client has a strikes key: mallory's.
    let strikes = keys_ending(&server, ":strikes");
    assert_eq!(strikes.len(), 1, "{strikes:?}");
    server.cli(&["DEL", &strikes[0]]);
    server.cli(&["LPUSH", &strikes[0], "x"]);
    let error = redis.check(&mallory, &policy, 1).await.unwrap_err();
    assert_eq!(error.cause(), Cause::KeyState, "{error}");
    for (i, bystander) in bystanders.iter().enumerate() {
        let decision = redis.check(bystander, &policy, 1).await.unwrap();
        assert!(
            !decision.is_allowed(),
            "bystander {i} admitted: its state was deleted"
        );
    }

    // The shared hash itself made a string: every client of the shard
    // fails alike, and that key, no hash, is what is deleted.
    let shared = redis.redis_keys(&mallory, &policy.limits()[0]).remove(0);
    assert_eq!(server.cli(&["TYPE", &shared]), "hash");
    server.cli(&["SET", &shared, "not a hash"]);
    let error = redis.check(&bystanders[0], &policy, 1).await.unwrap_err();
    assert_eq!(error.cause(), Cause::KeyState, "{error}");
    assert!(redis
        .check(&bystanders[0], &policy, 1)
        .await
        .unwrap()
        .is_allowed());
}

/// A fault of the crate's own scripts (here a script of one runtime error,
/// swapped in on the way for the decision's) looks like a key's trouble by
/// its text. Such a fault was classed the key's: closed mode answered 1,504
/// of 1,504 with 503, the breaker never opened, the health said
/// "deciding", and every decision ran `DEL`s. Now the keys are checked,
/// found sound, and the failure is the store's: the breaker opens, the
/// health says failing, nothing is deleted.
#[tokio::test]
async fn a_fault_the_keys_do_not_explain_is_the_store_s() {
    for format in [KeyFormat::default(), KeyFormat::PACKED] {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let url = server
            .limiter_url()
            .replace(&format!(":{}", server.port), &format!(":{}", proxy.port));
        let redis = RedisBackend::builder(&url)
            .timeout(AGREE)
            .key_format(format)
            .max_batch(1)
            .connect()
            .await
            .unwrap();
        let (policy, client) = (policy(), Key::new("user", "ann"));
        assert!(redis.check(&client, &policy, 1).await.unwrap().is_allowed());
        let keys_before = server.cli(&["DBSIZE"]);
        let sha = redis.evalsha_command(&client, &policy, 1)[1].clone();
        let faulty = server.cli(&["SCRIPT", "LOAD", "local t = nil; return t.field"]);
        assert_eq!(faulty.len(), 40, "{faulty}");
        proxy.swap(Some((sha.as_bytes(), faulty.as_bytes())));
        let deletes = calls(&server, "del") + calls(&server, "hdel");

        let backend = redis
            .clone()
            .with_breaker()
            .failures_to_open(5)
            .open_for(Duration::from_secs(60));
        let mut causes = Vec::new();
        for _ in 0..8 {
            let error = backend.check(&client, &policy, 1).await.unwrap_err();
            causes.push(error.cause());
        }
        assert_eq!(
            causes,
            [
                [Cause::Other; 5].as_slice(),
                [Cause::BreakerOpen; 3].as_slice()
            ]
            .concat(),
            "{format:?}"
        );
        assert!(
            matches!(redis.health(), StoreHealth::Failing { .. }),
            "{format:?}: {}",
            redis.health()
        );
        assert_eq!(
            calls(&server, "del") + calls(&server, "hdel"),
            deletes,
            "{format:?}: deleted"
        );
        assert_eq!(server.cli(&["DBSIZE"]), keys_before, "{format:?}");
    }
}
