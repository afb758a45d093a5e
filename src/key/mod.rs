//! Keys: who a request is counted against, and the extractors that find them.
//!
//! | extractor | key | namespace |
//! |---|---|---|
//! | [`Header`] | a header's value (`x-user-id`) | `header:<name>` |
//! | [`ClientIp`] | the client address (IPv6 grouped by prefix) | `ip` |
//! | [`ApiKey`] | a keyed hash of an API key, never the key itself | `api-key` |
//! | `Endpoint` (feature `axum`) | method + route template (axum's `MatchedPath`) | `endpoint` |
//! | [`Global`] | one key for everything | `global` |
//! | a tuple of extractors | each key, length-prefixed | `+` |
//! | [`key_fn`] | whatever the closure returns | the closure's choice |
//!
//! A [`Key`] is a namespace (what kind of identity: `user`, `ip`, `api-key`,
//! ...) and a value (whose). The namespace is length-prefixed in the key's
//! bytes, so keys of different kinds never collide, whatever bytes a client
//! sends as the value: `user` `1` is not `ip` `1`, and `us` `er1` is neither.
//!
//! ```
//! use tower_ratelimit::key::Key;
//!
//! let alice = Key::new("user", "alice");
//! assert_eq!(alice.namespace(), "user");
//! assert_eq!(alice.value(), b"alice");
//! assert_ne!(Key::new("user", "1"), Key::new("ip", "1"));
//! assert_ne!(Key::new("us", "er1"), Key::new("user", "1"));
//! ```

mod api_key;
mod client_ip;
#[cfg(feature = "axum")]
mod endpoint;
mod extractor;
mod head;
mod header;
#[allow(clippy::module_inception)] // named after the type it holds
mod key;

pub use api_key::ApiKey;
#[cfg(feature = "serve")]
pub(crate) use client_ip::canonical;
pub use client_ip::{ClientIp, ForwardedHeader, PeerAddr};
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use endpoint::Endpoint;
pub use extractor::{key_fn, Global, KeyError, KeyExtractor, KeyFn, Or};
pub use head::RequestHead;
pub use header::Header;
pub use key::{Key, MAX_KEY_VALUE};
