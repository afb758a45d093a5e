//! What the request path allocates, counted by a global allocator (a test
//! binary of its own: the allocator is the process's). Counts are per
//! thread, so tests running beside each other do not disturb them.

// A global allocator is unsafe to write; it only forwards to `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::{ready, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use tower::{service_fn, ServiceExt};
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::key::{Header, Key};
use tower_ratelimit::layer::HeaderStyle;
use tower_ratelimit::{Policy, RateLimitLayer};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: the thread's counter may be gone while it exits.
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// How many allocations `f` makes on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (ALLOCATIONS.with(Cell::get) - before, out)
}

#[test]
fn a_decision_under_one_or_two_limits_allocates_nothing() {
    let backend = MemoryBackend::new();
    let key = Key::new("user", "alice");
    for (text, expected) in [
        ("10/s", 0),
        ("10/s; 1000/h", 0),
        ("10/s; 1000/h; 10000/d", 1), // three or more: one array on the heap
    ] {
        let policy: Policy = text.parse().unwrap();
        // The key is known after the first decision.
        assert!(backend.check_now(&key, &policy, 1).is_allowed());
        let (n, decision) = allocations(|| backend.check_now(&key, &policy, 1));
        assert!(decision.is_allowed());
        assert_eq!(decision.outcomes().len(), policy.limits().len());
        assert_eq!(n, expected, "{text}");
    }
}

/// Poll `fut` to completion on this thread (the memory backend and the
/// inner service below are ready at once).
fn now<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

#[test]
fn an_admitted_request_gets_no_extension_allocated_for_it() {
    // The inner service notes what the request arrived with.
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let noted = Arc::clone(&seen);
    let inner = service_fn(move |req: Request<()>| {
        noted.store(req.extensions().len(), Ordering::Relaxed);
        ready(Ok::<_, Infallible>(Response::new(())))
    });
    let layer = RateLimitLayer::new("100/s".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .headers(HeaderStyle::None);
    let limited = tower::ServiceBuilder::new().layer(layer).service(inner);
    let request = || {
        Request::get("/")
            .header("x-user-id", "alice")
            .body(())
            .unwrap()
    };
    let bare = service_fn(|_: Request<()>| ready(Ok::<_, Infallible>(Response::new(()))));
    now(limited.clone().oneshot(request())).unwrap();

    let (bare_allocations, _) = allocations(|| now(bare.oneshot(request())).unwrap());
    let (n, res) = allocations(|| now(limited.oneshot(request())).unwrap());
    assert_eq!(res.status(), 200);
    assert_eq!(
        seen.load(Ordering::Relaxed),
        0,
        "the store's decision leaves no mark"
    );
    // Beyond the bare service's: the key's bytes and the response body's
    // wrapper at most; no extension map, no boxed mark.
    // Not one allocation beyond the bare service's: the key is short enough
    // to be kept inline, and there is no extension map, no boxed mark.
    assert_eq!(n, bare_allocations);
}
