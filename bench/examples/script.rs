//! `script <compact|packed> <lean|general> [batch] [sliding]`: the Lua
//! script the crate runs for a check under one token bucket (1,000,000/s),
//! as `Shape::source` assembles it, on stdout: `lean` the lean script,
//! `general` the general driver (the same limit with denials counted);
//! `batch`, the script of a batch of such decisions; `sliding`, under one
//! sliding window instead. `scripts/redis-instructions` and
//! `scripts/redis-split` measure these, so what they count is what a
//! decision runs.

use tower_ratelimit::backend::{KeyFormat, RedisBackend};
use tower_ratelimit::{Algorithm, Policy, Quota};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (format, counts_denied) = match (
        args.first().map(String::as_str),
        args.get(1).map(String::as_str),
    ) {
        (Some("compact"), Some(shape)) => (KeyFormat::Compact, shape == "general"),
        (Some("packed"), Some(shape)) => (KeyFormat::PACKED, shape == "general"),
        _ => return Err("usage: script <compact|packed> <lean|general> [batch] [sliding]".into()),
    };
    let has = |word: &str| args.iter().skip(2).any(|a| a == word);
    let algorithm = match has("sliding") {
        true => Algorithm::SlidingWindow,
        false => Algorithm::TokenBucket,
    };
    let policy = Policy::builder()
        .limit("bucket", algorithm, Quota::per_second(1_000_000)?)
        .count_denied(counts_denied)
        .build()?;
    let source = match has("batch") {
        true => RedisBackend::batch_script_source(format, &policy, 1),
        false => RedisBackend::script_source(format, &policy, 1),
    };
    print!("{source}");
    Ok(())
}
