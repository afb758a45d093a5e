//! A key from a request header (a user id an auth proxy put there, a tenant, an API client).

use std::sync::Arc;

use http::HeaderName;

use super::{Key, KeyError, KeyExtractor, MAX_KEY_VALUE};
use crate::key::RequestHead;

/// Keys each request by the value of one header (e.g. `x-user-id`), as raw
/// bytes: any bytes are fine, but an empty value, a value over
/// [`MAX_KEY_VALUE`] bytes or a header sent twice is no key at all.
///
/// Only use it for a header a trusted component (an auth layer or proxy)
/// sets; otherwise clients choose their own key. Pair it with a fallback:
///
/// ```
/// use tower_ratelimit::key::{ClientIp, KeyExtractor, Header};
/// use tower_ratelimit::key::RequestHead;
///
/// let key = Header::new("x-user-id").or(ClientIp::new());
/// let req = http::Request::get("/").header("x-user-id", "alice").body(()).unwrap();
/// let k = key.extract(&RequestHead::from(&req)).unwrap();
/// assert_eq!((k.namespace(), k.value()), ("header:x-user-id", &b"alice"[..]));
/// ```
#[derive(Clone, Debug)]
pub struct Header {
    name: HeaderName,
    // Shared: services (and their extractors) are cloned per request.
    namespace: Arc<str>,
}

impl Header {
    /// Key by the header `name`.
    ///
    /// # Panics
    ///
    /// If `name` is not a valid lowercase header name (like
    /// [`HeaderName::from_static`]): a mistake in code, caught at start-up.
    pub fn new(name: &'static str) -> Self {
        Self::from_name(HeaderName::from_static(name))
    }

    /// Key by the header `name`.
    pub fn from_name(name: HeaderName) -> Self {
        Self {
            namespace: format!("header:{name}").into(),
            name,
        }
    }
}

impl Header {
    /// The key of a request whose header holds `value`: for per-key
    /// policies and lists, without a request.
    pub fn key_of(&self, value: &[u8]) -> Key {
        Key::new(&self.namespace, value)
    }
}

impl KeyExtractor for Header {
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        let mut values = req.headers.get_all(&self.name).iter();
        let missing = || KeyError::MissingHeader(self.name.clone());
        let invalid = |why| KeyError::InvalidHeader(self.name.clone(), why);
        let value = values.next().ok_or_else(missing)?;
        if values.next().is_some() {
            return Err(invalid("sent more than once"));
        }
        match value.as_bytes() {
            [] => Err(missing()),
            v if v.len() > MAX_KEY_VALUE => Err(invalid("too long")),
            v => Ok(self.key_of(v)),
        }
    }
}
