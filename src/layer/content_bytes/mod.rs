//! Limits counted in bytes of content (feature `content-bytes`): request
//! bodies as they stream in, response bodies once they are sent.
//! [`ContentBytesLayer`] is the layer (its page has an example), and
//! [`ContentBytes`], [`ContentBytesFuture`], [`RequestBytes`] and
//! [`ResponseBytes`] its service, future and counted bodies;
//! [`ContentBytesExceeded`] is why a body was cut off.

mod body;
mod future;
mod layer;
mod service;

pub use body::{ContentBytesExceeded, RequestBytes, ResponseBytes};
pub use future::ContentBytesFuture;
pub use layer::ContentBytesLayer;
pub use service::ContentBytes;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use crate::backend::OnBackendError;
use crate::layer::answer::headers::HeaderStyle;
use crate::layer::answer::response::LimitedResponse;
use crate::{Decision, Policy};

/// What every request of a layer shares.
#[derive(Clone, Debug)]
struct Settings<B> {
    policy: Policy,
    backend: B,
    requests: bool,
    responses: bool,
    min_grant: u32,
    headers: HeaderStyle,
    on_error: OnBackendError,
    limited: LimitedResponse,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The most bytes one request may ever pass: the smallest capacity of the
/// policy's limits.
fn capacity(policy: &Policy) -> u64 {
    policy
        .limits()
        .iter()
        .map(|l| u64::from(l.capacity()))
        .min()
        .unwrap_or(u64::MAX)
}

/// What the request body and the future share: the latest decision, and
/// whether (and why) the body was cut off.
struct Shared {
    last: Option<Decision>,
    cut: Option<Cut>,
}

type SharedRef = Arc<Mutex<Shared>>;

fn lock(shared: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone, Copy)]
enum Cut {
    /// Nothing more fits now: 429 (the denial is the shared `last`).
    Limited,
    /// The body is larger than the limit can ever hold: 413.
    TooLarge,
    /// The backend failed and the layer fails closed: 503.
    Failed,
}

/// Runs `task` on the current tokio runtime, if there is one (without one,
/// the refund or charge is lost: the reservation stands).
fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}
