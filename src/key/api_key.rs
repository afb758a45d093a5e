//! A key from an API key, stored only as a keyed hash.

use hmac::{Hmac, KeyInit, Mac};
use http::header::AUTHORIZATION;
use http::HeaderName;
use sha2::Sha256;

use super::{Key, KeyError, KeyExtractor};
use crate::key::RequestHead;

/// The longest API key accepted (bytes).
const MAX_API_KEY: usize = 1024;

/// Keys each request by its API key, taken from `Authorization: Bearer …`
/// or a named header. The key itself is never stored, logged or put in a
/// [`Key`]: only the first 128 bits of HMAC-SHA256 under a secret.
///
/// The secret is required, and must be the same on every server that
/// shares limits (a shared Redis backend): one API key is then one identity
/// everywhere. (A secret picked per process would silently make one client
/// one identity per server, with the limit once per server.) Take it from
/// your secret store; 32 random bytes are plenty.
///
/// ```
/// use tower_ratelimit::key::{ApiKey, KeyExtractor};
/// use tower_ratelimit::key::RequestHead;
///
/// let key = ApiKey::header("x-api-key", b"from your secret store");
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
    /// From `Authorization: Bearer <key>`, hashed under `secret` (the same
    /// on every server).
    pub fn bearer(secret: impl AsRef<[u8]>) -> Self {
        Self::new(Source::Bearer, secret.as_ref())
    }

    /// From the header `name` (the whole value is the key), hashed under
    /// `secret` (the same on every server).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid lowercase header name.
    pub fn header(name: &'static str, secret: impl AsRef<[u8]>) -> Self {
        Self::new(
            Source::Header(HeaderName::from_static(name)),
            secret.as_ref(),
        )
    }

    /// From the header `name` (the whole value is the key), hashed under
    /// `secret` (the same on every server).
    pub fn from_name(name: HeaderName, secret: impl AsRef<[u8]>) -> Self {
        Self::new(Source::Header(name), secret.as_ref())
    }

    /// The key a request presenting the API key `raw` is counted against:
    /// for per-key policies and lists, without a request.
    pub fn key_of(&self, raw: &[u8]) -> Key {
        let mut mac = self.mac.clone();
        mac.update(raw);
        let digest = mac.finalize().into_bytes();
        Key::new("api-key", &digest[..16])
    }

    fn new(source: Source, secret: &[u8]) -> Self {
        Self {
            source,
            mac: Hmac::new_from_slice(secret)
                .unwrap_or_else(|_| unreachable!("HMAC takes any key length")),
        }
    }

    /// The raw API key in `req`, if any; it is hashed at once, never kept.
    fn raw<'a>(&self, req: &RequestHead<'a>) -> Result<&'a [u8], KeyError> {
        let (name, strip_bearer) = match &self.source {
            Source::Bearer => (&AUTHORIZATION, true),
            Source::Header(name) => (name, false),
        };
        let missing = || KeyError::MissingHeader(name.clone());
        let invalid = |why| KeyError::InvalidHeader(name.clone(), why);
        let mut values = req.headers.get_all(name).iter();
        let value = values.next().ok_or_else(missing)?;
        if values.next().is_some() {
            return Err(invalid("sent more than once"));
        }
        let mut raw = value.as_bytes();
        if strip_bearer {
            let scheme = raw.get(..7).ok_or_else(missing)?;
            if !scheme.eq_ignore_ascii_case(b"bearer ") {
                return Err(missing());
            }
            raw = raw[7..].trim_ascii();
        }
        match raw {
            [] => Err(missing()),
            r if r.len() > MAX_API_KEY => Err(invalid("too long")),
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
        Ok(self.key_of(self.raw(req)?))
    }
}
