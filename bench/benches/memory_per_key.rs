//! Memory per key at 1M and 10M keys, for each algorithm and for governor.
//!
//! Each measurement runs in a fresh child process: it records resident
//! memory (RSS, from /proc/self/statm), fills the limiter with N distinct
//! keys, and records RSS again. For our backend it also prints the exact
//! accounting (`MemoryBackend::memory_bytes`: table slots plus sliding-log
//! entries). Governor is measured with IP-address keys and with string keys.
//!
//! Run: `cargo bench -p tower-ratelimit-bench --bench memory_per_key` (add `-- 1000000` for one size).
//!
//! `cargo bench -p tower-ratelimit-bench --bench memory_per_key -- flood` instead sends 10 million
//! distinct keys through a backend capped at 1 million and prints resident
//! memory when the cap is first reached and at the end: a key flood must not
//! grow memory past what the cap holds.

use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::process::Command;

use governor::{Quota as GovernorQuota, RateLimiter};
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn ip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(i))
}

/// 10 million distinct keys through a backend capped at 1 million.
fn flood() {
    const CAP: u32 = 1_000_000;
    const KEYS: u32 = 10_000_000;
    let policy = Policy::single(Algorithm::Gcra, Quota::per_hour(100).unwrap()).unwrap();
    let backend = MemoryBackend::builder().max_keys(CAP as usize).build();
    let before = rss_bytes();
    let mut at_cap = 0;
    for i in 0..KEYS {
        backend.check_now(&Key::new("ip", ip(i).to_string()), &policy, 1);
        if i + 1 == CAP {
            at_cap = rss_bytes().saturating_sub(before);
        }
    }
    let at_end = rss_bytes().saturating_sub(before);
    let mb = |bytes: usize| bytes as f64 / 1e6;
    println!(
        "flood: {KEYS} keys through a cap of {CAP}: RSS grew {:.1} MB at the cap, {:.1} MB at the end; \
         {} states held ({:.1} MB exact)",
        mb(at_cap),
        mb(at_end),
        backend.len(),
        mb(backend.memory_bytes())
    );
}

/// Fill one limiter with `n` keys and print: name, RSS bytes/key, exact bytes/key.
fn child(subject: &str, n: u32) {
    let before = rss_bytes();
    // Each arm returns the filled limiter, kept alive until RSS is read.
    let (exact, limiter): (Option<usize>, Box<dyn std::any::Any>) = match subject {
        "governor-ip" => {
            let limiter = RateLimiter::keyed(GovernorQuota::per_hour(NonZeroU32::MIN));
            for i in 0..n {
                let _ = limiter.check_key(&ip(i));
            }
            (None, Box::new(limiter))
        }
        "governor-string" => {
            let limiter = RateLimiter::keyed(GovernorQuota::per_hour(NonZeroU32::MIN));
            for i in 0..n {
                let _ = limiter.check_key(&format!("user-{i}"));
            }
            (None, Box::new(limiter))
        }
        name => {
            let algorithm: Algorithm = name.parse().expect("an algorithm");
            let policy = Policy::single(algorithm, Quota::per_hour(100).unwrap()).unwrap();
            // Headroom over n: the cap is split per shard, and tables grow with use, not with the cap;
            // and no cap on the sliding logs' bytes (64 MiB by default: about a million logs).
            let backend = MemoryBackend::builder()
                .max_keys(2 * n as usize)
                .max_log_bytes(usize::MAX)
                .build();
            for i in 0..n {
                backend.check_now(&Key::new("ip", ip(i).to_string()), &policy, 1);
            }
            assert_eq!(backend.len(), n as usize, "every key kept");
            (Some(backend.memory_bytes()), Box::new(backend))
        }
    };
    let grown = rss_bytes().saturating_sub(before);
    drop(limiter);
    let per_key = |bytes: usize| bytes as f64 / f64::from(n);
    match exact {
        Some(exact) => println!(
            "{subject:<16} {n:>9} keys  RSS {:>6.1} B/key  exact {:>6.1} B/key",
            per_key(grown),
            per_key(exact)
        ),
        None => println!(
            "{subject:<16} {n:>9} keys  RSS {:>6.1} B/key",
            per_key(grown)
        ),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], args[i + 2].parse().expect("a key count"));
        return;
    }
    if args.iter().any(|a| a == "flood") {
        flood();
        return;
    }
    let sizes: Vec<u32> = match args
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect::<Vec<_>>()
    {
        sizes if !sizes.is_empty() => sizes,
        _ => vec![1_000_000, 10_000_000],
    };
    let me = std::env::current_exe().expect("own path");
    let subjects = Algorithm::ALL
        .iter()
        .map(|a| a.to_string())
        .chain(["governor-ip".to_owned(), "governor-string".to_owned()]);
    let subjects: Vec<String> = subjects.collect();
    for n in sizes {
        for subject in &subjects {
            let status = Command::new(&me)
                .args(["--child", subject, &n.to_string()])
                .status()
                .expect("run a child");
            assert!(status.success(), "{subject} at {n} keys failed");
        }
    }
}
