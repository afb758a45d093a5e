//! The trait every key extractor implements, and its combinators.

use std::fmt;

use super::Key;
use crate::key::RequestHead;

/// Derives the [`Key`] a request is counted against.
///
/// Implemented by the built-in extractors, by tuples of extractors (a
/// composite key: `(Header, Endpoint)` is per user per endpoint), and by
/// closures wrapped in [`key_fn`].
pub trait KeyExtractor: Clone + Send + Sync + 'static {
    /// The key for this request, or why there is none.
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError>;

    /// Use `other` when this extractor finds no key.
    ///
    /// ```
    /// use tower_ratelimit::key::{ClientIp, KeyExtractor, Header};
    /// let per_user_else_per_ip = Header::new("x-user-id").or(ClientIp::new());
    /// ```
    fn or<O: KeyExtractor>(self, other: O) -> Or<Self, O>
    where
        Self: Sized,
    {
        Or(self, other)
    }
}

/// Why no key could be derived from a request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// What the key is made of is absent (a header, the peer address, a route).
    Missing(&'static str),
    /// It is present but unusable (too long, malformed); says what and why.
    Invalid(&'static str, &'static str),
    /// The header the key is read from is absent or empty.
    MissingHeader(http::HeaderName),
    /// The header the key is read from is unusable: sent more than once,
    /// too long.
    InvalidHeader(http::HeaderName, &'static str),
    /// The connection's peer address is not in the request: a server set up
    /// without it, not a client's fault. Its text says how to fix that.
    NoPeerAddress,
}

impl KeyError {
    /// Whether the server's setup, not the request, is at fault (every
    /// request will fail the same way until it is fixed).
    pub fn is_misconfiguration(&self) -> bool {
        matches!(self, Self::NoPeerAddress)
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(what) => write!(f, "missing {what}"),
            Self::Invalid(what, why) => write!(f, "invalid {what}: {why}"),
            Self::MissingHeader(name) => write!(f, "missing header {name}"),
            Self::InvalidHeader(name, why) => write!(f, "invalid header {name}: {why}"),
            Self::NoPeerAddress => f.write_str(
                "missing peer address: serve the app with \
                 into_make_service_with_connect_info::<SocketAddr>(), or put a \
                 PeerAddr in the request extensions, or key requests by something else",
            ),
        }
    }
}

impl std::error::Error for KeyError {}

/// The first extractor's key, or the second's if the first finds none.
/// Built by [`KeyExtractor::or`].
#[derive(Clone, Debug)]
pub struct Or<A, B>(A, B);

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        self.0.extract(req).or_else(|_| self.1.extract(req))
    }
}

/// A closure as a key extractor.
///
/// ```
/// use tower_ratelimit::key::{key_fn, KeyError};
/// use tower_ratelimit::key::Key;
///
/// // Per tenant, from the host name.
/// let per_tenant = key_fn(|req| {
///     let host = req.uri.host().ok_or(KeyError::Missing("host"))?;
///     Ok(Key::new("tenant", host))
/// });
/// ```
pub fn key_fn<F>(f: F) -> KeyFn<F>
where
    F: Fn(&RequestHead<'_>) -> Result<Key, KeyError> + Clone + Send + Sync + 'static,
{
    KeyFn(f)
}

/// A closure as a key extractor; see [`key_fn`].
#[derive(Clone)]
pub struct KeyFn<F>(F);

impl<F> fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyFn")
    }
}

impl<F> KeyExtractor for KeyFn<F>
where
    F: Fn(&RequestHead<'_>) -> Result<Key, KeyError> + Clone + Send + Sync + 'static,
{
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        (self.0)(req)
    }
}

/// One key for every request: a limit on the whole service.
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _: &RequestHead<'_>) -> Result<Key, KeyError> {
        Ok(Key::new("global", ""))
    }
}

macro_rules! tuple_extractor {
    ($($name:ident),+) => {
        /// A composite key: every extractor's key, each length-prefixed, so
        /// no two different combinations share a key.
        impl<$($name: KeyExtractor),+> KeyExtractor for ($($name,)+) {
            #[allow(non_snake_case)]
            fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
                let ($($name,)+) = self;
                Ok(Key::composite(&[$($name.extract(req)?),+]))
            }
        }
    };
}

tuple_extractor!(A, B);
tuple_extractor!(A, B, C);
tuple_extractor!(A, B, C, D);
