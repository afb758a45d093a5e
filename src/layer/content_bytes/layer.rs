//! [`ContentBytesLayer`]: the policy in bytes, the key and the settings every request shares.

use std::sync::Arc;

use tower_layer::Layer;

use super::service::ContentBytes;
use super::Settings;
use crate::backend::{Backend, MemoryBackend, OnBackendError};
use crate::key::{ClientIp, KeyExtractor};
use crate::layer::answer::headers::HeaderStyle;
use crate::layer::answer::response::LimitedResponse;
use crate::Policy;

/// Limits in bytes of content, in and out.
///
/// A request is checked before its handler runs at what its
/// `Content-Length` declares (0 without one): a body larger than a limit
/// can ever hold is refused with 413 at once, one larger than what is left
/// with 429, and a client in debt is refused with 429. The declaration is
/// only a first reservation: the body is counted as it is read, frame by
/// frame, and whatever passes the reservation is asked of the backend in
/// grants of at least [`min_grant`](ContentBytesLayer::min_grant) bytes
/// (exactly what is missing, when a whole grant no longer fits). When
/// nothing more fits, the body ends with an error in the handler, and the
/// layer answers 429 (or 413, for a body larger than the limit) instead of
/// whatever the handler made of it. When the body ends, or is dropped
/// unread, what was granted but not read is given back: a request is
/// charged exactly the bytes its handler read, and a client never gets more
/// bytes through than the limit allows.
///
/// A response body's bytes are counted as they are sent and charged once
/// it ends (or is dropped): past the limit if need be, as a debt that the
/// client's next requests wait out (see
/// [`Backend::settle`](crate::backend::Backend::settle)).
///
/// The quota headers carry the unit: `RateLimit-Policy:
/// "upload";q=1000000;w=60;qu="content-bytes"`.
///
/// ```
/// use axum::{routing::post, Router};
/// use tower_ratelimit::key::Header;
/// use tower_ratelimit::layer::content_bytes::ContentBytesLayer;
/// use tower_ratelimit::Policy;
///
/// // 10 MB a minute per user, in and out.
/// let bytes = ContentBytesLayer::new("transfer = 10000000/min".parse::<Policy>()?)
///     .key(Header::new("x-user-id"));
/// let app: Router = Router::new()
///     .route("/upload", post(|body: axum::body::Bytes| async move { body.len().to_string() }))
///     .layer(bytes);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct ContentBytesLayer<K = ClientIp, B = MemoryBackend> {
    pub(super) key: K,
    pub(super) settings: Settings<B>,
}

impl ContentBytesLayer {
    /// `policy`'s limits counted in bytes (its numbers are bytes: `"upload
    /// = 1000000/min"` is a megabyte a minute), per client IP, in memory.
    pub fn new(policy: Policy) -> Self {
        Self {
            key: ClientIp::new(),
            settings: Settings {
                policy: policy.in_bytes(),
                backend: MemoryBackend::new(),
                requests: true,
                responses: true,
                min_grant: 64 * 1024,
                headers: HeaderStyle::default(),
                on_error: OnBackendError::default(),
                limited: LimitedResponse::default(),
            },
        }
    }
}

impl<K, B> ContentBytesLayer<K, B> {
    /// Count each request against `key`'s bytes.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> ContentBytesLayer<K2, B> {
        ContentBytesLayer {
            key,
            settings: self.settings,
        }
    }

    /// Keep the counts in `backend` (Redis, to share them among servers).
    pub fn backend<B2: Backend>(self, backend: B2) -> ContentBytesLayer<K, B2> {
        let s = self.settings;
        ContentBytesLayer {
            key: self.key,
            settings: Settings {
                backend,
                policy: s.policy,
                requests: s.requests,
                responses: s.responses,
                min_grant: s.min_grant,
                headers: s.headers,
                on_error: s.on_error,
                limited: s.limited,
            },
        }
    }

    /// Whether request bodies count (default: yes).
    pub fn requests(mut self, count: bool) -> Self {
        self.settings.requests = count;
        self
    }

    /// Whether response bodies count (default: yes).
    pub fn responses(mut self, count: bool) -> Self {
        self.settings.responses = count;
        self
    }

    /// The fewest bytes a grant asks the backend for while a body streams
    /// past its reservation (default 64 KiB): fewer calls to the store, at
    /// the price of holding up to this much of the budget until the body
    /// ends.
    pub fn min_grant(mut self, bytes: u32) -> Self {
        self.settings.min_grant = bytes.max(1);
        self
    }

    /// Which quota headers to send (default: the `X-RateLimit-*` ones).
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.settings.headers = style;
        self
    }

    /// What to do when the backend cannot decide (default: let the bytes
    /// through uncounted; [`Deny`](OnBackendError::Deny): 503 before the
    /// handler, a cut-off body while it reads).
    pub fn on_backend_error(mut self, action: OnBackendError) -> Self {
        self.settings.on_error = action;
        self
    }
}

impl<S, K: Clone, B: Clone> Layer<S> for ContentBytesLayer<K, B> {
    type Service = ContentBytes<S, K, B>;

    fn layer(&self, inner: S) -> Self::Service {
        ContentBytes {
            inner,
            key: self.key.clone(),
            settings: Arc::new(self.settings.clone()),
        }
    }
}
