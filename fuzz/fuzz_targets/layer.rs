//! The layer acting on an answer known at once (the memory backend's,
//! within `call`) and on one that comes later (the same backend answering
//! on a second poll): any trace of requests, with any key bytes and any
//! claimed cost, gets the same statuses, quota headers and bodies from
//! both, and the inner service is called as often. Never a panic.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use libfuzzer_sys::fuzz_target;
use tower_ratelimit::Algorithm;

#[path = "../../tests/it/support/later.rs"]
mod later;
use later::same_answers;

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let algorithm = Algorithm::ALL[usize::from(first) % 6];
    // Each request: a step of time, a claimed cost (any text), a key.
    let mut trace = Vec::new();
    while let [step, cost_len, key_len, tail @ ..] = rest {
        let (cost_len, key_len) = (usize::from(*cost_len % 8), usize::from(*key_len % 64));
        if tail.len() < cost_len + key_len {
            break;
        }
        let (cost, tail) = tail.split_at(cost_len);
        let (key, tail) = tail.split_at(key_len);
        rest = tail;
        trace.push((Duration::from_millis(u64::from(*step) * 20), key, cost));
    }
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(same_answers::<Empty<Bytes>>(algorithm, trace));
});
