//! The layer acting on an answer known at once (the memory backend's,
//! within `call`) and on one that comes later (the same backend answering
//! on a second poll): any trace of requests, with any key bytes and any
//! claimed cost, gets the same statuses, quota headers and bodies from
//! both, and the inner service is called as often. Never a panic.
#![no_main]

use std::convert::Infallible;
use std::future::ready;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{Empty, Full};
use libfuzzer_sys::fuzz_target;
use tower::{service_fn, ServiceBuilder};
use tower_ratelimit::backend::{Either, MemoryBackend};
use tower_ratelimit::clock::{ManualClock, Micros};
use tower_ratelimit::Algorithm;

#[path = "../../tests/it/support/later.rs"]
mod later;
use later::{both_answer, costed, two_limits, Later};

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let algorithm = Algorithm::ALL[usize::from(first) % 6];
    let policy = two_limits(algorithm);
    let clocks = [
        ManualClock::new(Micros::from_secs(1_000)),
        ManualClock::new(Micros::from_secs(1_000)),
    ];
    let stack = |backend| {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let svc = ServiceBuilder::new()
            .layer(costed(policy.clone(), backend))
            .service(service_fn(move |_: Request<Empty<Bytes>>| {
                counted.fetch_add(1, Ordering::SeqCst);
                ready(Ok::<_, Infallible>(Response::new(Full::new(
                    Bytes::from_static(b"ok"),
                ))))
            }));
        (svc, calls)
    };
    let memory = |clock: &ManualClock| MemoryBackend::builder().clock(clock.clone()).build();
    let (mut at_once, at_once_calls) = stack(Either::Left(memory(&clocks[0])));
    let (mut later, later_calls) = stack(Either::Right(Later(memory(&clocks[1]))));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Each request: a step of time, a claimed cost (any text), a key.
    while let [step, cost_len, key_len, tail @ ..] = rest {
        let (cost_len, key_len) = (usize::from(*cost_len % 8), usize::from(*key_len % 64));
        if tail.len() < cost_len + key_len {
            break;
        }
        let (cost, tail) = tail.split_at(cost_len);
        let (key, tail) = tail.split_at(key_len);
        rest = tail;
        for clock in &clocks {
            clock.advance(Duration::from_millis(u64::from(*step) * 20));
        }
        let (Ok(cost), Ok(key)) = (HeaderValue::from_bytes(cost), HeaderValue::from_bytes(key))
        else {
            continue; // http refuses them: they never reach a layer
        };
        let request = || {
            Request::get("/")
                .header("x-user-id", key.clone())
                .header("x-cost", cost.clone())
                .body(Empty::new())
                .unwrap()
        };
        let (a, b) = runtime.block_on(both_answer(&mut at_once, &mut later, request));
        assert_eq!(a, b);
    }
    assert_eq!(
        at_once_calls.load(Ordering::SeqCst),
        later_calls.load(Ordering::SeqCst)
    );
});
