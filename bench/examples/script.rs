//! `script <compact|packed> <lean|general>`: the Lua script the crate runs
//! for a check under one token bucket (1,000,000/s), as `Shape::source`
//! assembles it, on stdout: `lean` the lean script, `general` the general
//! driver (the same limit with denials counted). `scripts/redis-instructions`
//! measures these, so what it counts is what a decision runs.

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
        _ => return Err("usage: script <compact|packed> <lean|general>".into()),
    };
    let policy = Policy::builder()
        .limit(
            "bucket",
            Algorithm::TokenBucket,
            Quota::per_second(1_000_000)?,
        )
        .count_denied(counts_denied)
        .build()?;
    print!("{}", RedisBackend::script_source(format, &policy, 1));
    Ok(())
}
