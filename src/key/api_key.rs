//! A key from an API key, stored only as a keyed hash.

use std::hash::{BuildHasher, RandomState};

use hmac::{Hmac, KeyInit, Mac};
use http::header::AUTHORIZATION;
use http::HeaderName;
use sha2::Sha256;

use super::{Key, KeyError, KeyExtractor};
use crate::RequestHead;

/// The longest API key accepted (bytes).
const MAX_API_KEY: usize = 1024;

/// Keys each request by its API key, taken from `Authorization: Bearer …`
/// or a named header. The key itself is never stored, logged or put in a
/// [`Key`]: only the first 128 bits of HMAC-SHA256 under a secret.
///
/// Give every server the same [`secret`](ApiKey::secret) so that one API key
/// maps to one identity across servers (a shared Redis backend); without one,
/// each process picks a random secret.
///
/// ```
/// use tower_ratelimit::key::{ApiKey, KeyExtractor};
/// use tower_ratelimit::RequestHead;
///
/// let key = ApiKey::header("x-api-key").secret(b"from your secret store");
/// let req = http::Request::get("/").header("x-api-key", "sk-live-123").body(()).unwrap();
/// let k = key.extract(&RequestHead::from(&req)).unwrap();
/// assert_eq!(k.namespace(), "api-key");
/// assert_eq!(k.value().len(), 16);
/// assert!(!format!("{k:?}").contains("sk-live-123"));
/// ```
#[derive(Clone)]
pub struct ApiKey {
    source: Source,
    mac: Hmac<Sha256>,
}

#[derive(Clone, Debug)]
enum Source {
    Bearer,
    Header(HeaderName),
}

impl ApiKey {
    /// From `Authorization: Bearer <key>`.
    pub fn bearer() -> Self {
        Self::with_source(Source::Bearer)
    }

    /// From the header `name` (the whole value is the key).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid lowercase header name.
    pub fn header(name: &'static str) -> Self {
        Self::with_source(Source::Header(HeaderName::from_static(name)))
    }

    fn with_source(source: Source) -> Self {
        // A per-process random secret until one is given.
        let random = RandomState::new();
        let secret: Vec<u8> = (0..4u8)
            .flat_map(|i| random.hash_one(i).to_le_bytes())
            .collect();
        Self {
            source,
            mac: Hmac::new_from_slice(&secret)
                .unwrap_or_else(|_| unreachable!("HMAC takes any key length")),
        }
    }

    /// Hash keys under `secret`, the same on every server.
    pub fn secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.mac = Hmac::new_from_slice(secret.as_ref())
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        self
    }

    /// The raw API key in `req`, if any; it is hashed at once, never kept.
    fn raw<'a>(&self, req: &RequestHead<'a>) -> Result<&'a [u8], KeyError> {
        let (name, strip_bearer) = match &self.source {
            Source::Bearer => (&AUTHORIZATION, true),
            Source::Header(name) => (name, false),
        };
        let mut values = req.headers.get_all(name).iter();
        let value = values.next().ok_or(KeyError::Missing("API key"))?;
        if values.next().is_some() {
            return Err(KeyError::Invalid("API key", "sent more than once"));
        }
        let mut raw = value.as_bytes();
        if strip_bearer {
            let scheme = raw.get(..7).ok_or(KeyError::Missing("API key"))?;
            if !scheme.eq_ignore_ascii_case(b"bearer ") {
                return Err(KeyError::Missing("API key"));
            }
            raw = raw[7..].trim_ascii();
        }
        match raw {
            [] => Err(KeyError::Missing("API key")),
            r if r.len() > MAX_API_KEY => Err(KeyError::Invalid("API key", "too long")),
            r => Ok(r),
        }
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl KeyExtractor for ApiKey {
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        let raw = self.raw(req)?;
        let mut mac = self.mac.clone();
        mac.update(raw);
        let digest = mac.finalize().into_bytes();
        Ok(Key::new("api-key", &digest[..16]))
    }
}
