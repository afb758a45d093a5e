//! `Key`: a namespace and a value, length-prefixed so that keys of
//! different kinds never collide.

use std::fmt;

/// The longest value an extractor accepts from a client (bytes); longer
/// ones are [`KeyError::Invalid`](super::KeyError::Invalid), never truncated into someone else's key.
pub const MAX_KEY_VALUE: usize = 256;

/// Bytes held without allocating; longer keys go to the heap.
const INLINE: usize = 46;

/// A namespaced identity that a policy's limits are counted against.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key {
    repr: Repr,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    /// The key `value` in `namespace`. Namespaces longer than 255 bytes are
    /// cut to 255 (they are chosen by code, not by clients).
    #[inline]
    pub fn new(namespace: &str, value: impl AsRef<[u8]>) -> Self {
        let namespace = &namespace.as_bytes()[..namespace.len().min(255)];
        let value = value.as_ref();
        let total = 1 + namespace.len() + value.len();
        let repr = if total <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[0] = namespace.len() as u8;
            bytes[1..1 + namespace.len()].copy_from_slice(namespace);
            bytes[1 + namespace.len()..total].copy_from_slice(value);
            Repr::Inline {
                len: total as u8,
                bytes,
            }
        } else {
            let mut bytes = Vec::with_capacity(total);
            bytes.push(namespace.len() as u8);
            bytes.extend_from_slice(namespace);
            bytes.extend_from_slice(value);
            Repr::Heap(bytes.into_boxed_slice())
        };
        Self { repr }
    }

    /// Several keys as one: each key's bytes with a 4-byte length before them,
    /// so different combinations never encode alike.
    pub fn composite(parts: &[Key]) -> Self {
        let mut value = Vec::with_capacity(parts.iter().map(|k| 4 + k.as_bytes().len()).sum());
        for part in parts {
            let bytes = part.as_bytes();
            value.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            value.extend_from_slice(bytes);
        }
        Self::new("+", value)
    }

    /// The key whose [`as_bytes`](Self::as_bytes) are `bytes`, if they are
    /// one's (a namespace length no longer than what follows it).
    #[cfg(all(feature = "config", feature = "redis"))]
    pub(crate) fn from_encoded(bytes: &[u8]) -> Option<Self> {
        let (&len, rest) = bytes.split_first()?;
        let namespace = std::str::from_utf8(rest.get(..usize::from(len))?).ok()?;
        Some(Self::new(namespace, &rest[usize::from(len)..]))
    }

    /// The whole encoded key: namespace length, namespace, value.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(bytes) => bytes,
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        let bytes = self.as_bytes();
        let len = usize::from(bytes[0]);
        // Built from a &str cut at a byte count; a cut inside a character
        // would not be UTF-8, so fall back to the valid prefix.
        match std::str::from_utf8(&bytes[1..1 + len]) {
            Ok(ns) => ns,
            Err(e) => std::str::from_utf8(&bytes[1..1 + e.valid_up_to()]).unwrap_or_default(),
        }
    }

    /// The value, exactly as given (any bytes).
    pub fn value(&self) -> &[u8] {
        let bytes = self.as_bytes();
        &bytes[1 + usize::from(bytes[0])..]
    }
}

impl Key {
    /// The key as an operator may see it in logs and lists: the namespace,
    /// at most 4 leading printable characters of the value (none of a
    /// client IP's), and 32 bits of an HMAC-SHA256 of the whole key under
    /// the [redaction secret](Self::set_redaction_secret) —
    /// `header:x-user-id:alic…#9f86d081`, `ip:…#03c1be22` — enough to tell
    /// keys apart and recognise one in the logs of processes sharing the
    /// secret, never a whole user name, an address or a part of one. The
    /// hash is keyed, so no one without the secret can test guesses
    /// against it (an unkeyed one gives any IPv4 address away in 2³²
    /// tries at most, and in far fewer from a known prefix).
    ///
    /// ```
    /// use tower_ratelimit::key::Key;
    /// let redacted = Key::new("header:x-user-id", "alice@example.com").redacted();
    /// assert!(redacted.starts_with("header:x-user-id:alic…#"));
    /// assert_eq!(redacted.len(), "header:x-user-id:alic…#".len() + 8);
    /// assert_ne!(redacted, Key::new("header:x-user-id", "alice@example.org").redacted());
    /// assert!(Key::new("ip", [203, 0, 113, 7]).redacted().starts_with("ip:…#"));
    /// let both = Key::composite(&[Key::new("header:x-user-id", "alice"), Key::new("endpoint", "GET /a")]);
    /// assert!(both.redacted().starts_with("+(header:x-user-id,endpoint):…#"));
    /// ```
    pub fn redacted(&self) -> String {
        use hmac::{KeyInit, Mac};
        let mut out = String::with_capacity(self.namespace().len() + 24);
        out.push_str(self.namespace());
        // A composite key says which kinds of key it is made of, and no
        // part of any of their values.
        let parts = self.part_namespaces();
        if !parts.is_empty() {
            out.push('(');
            out.push_str(&parts.join(","));
            out.push(')');
        }
        out.push(':');
        if self.namespace() != "ip" && parts.is_empty() {
            out.extend(
                self.value()
                    .iter()
                    .take(4)
                    .take_while(|b| b.is_ascii_graphic())
                    .map(|&b| char::from(b)),
            );
        }
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(redaction_secret())
            .expect("HMAC takes a key of any length");
        mac.update(self.as_bytes());
        let tag = mac.finalize().into_bytes();
        out.push_str(&format!(
            "…#{:08x}",
            u32::from_be_bytes([tag[0], tag[1], tag[2], tag[3]])
        ));
        out
    }

    /// The namespaces of a [`composite`](Self::composite) key's parts, in
    /// order (none for any other key).
    fn part_namespaces(&self) -> Vec<&str> {
        let mut parts = Vec::new();
        if self.namespace() != "+" {
            return parts;
        }
        let mut rest = self.value();
        while let Some((len, tail)) = rest.split_first_chunk::<4>() {
            let len = u32::from_be_bytes(*len) as usize;
            let Some(part) = tail.get(..len) else { break };
            let namespace = part
                .split_first()
                .and_then(|(&n, after)| after.get(..usize::from(n)))
                .and_then(|n| std::str::from_utf8(n).ok());
            parts.push(namespace.unwrap_or("?"));
            rest = &tail[len..];
        }
        parts
    }

    /// Use `secret` for every [`redacted`](Self::redacted) form this
    /// process makes from now on, instead of a random secret of its own:
    /// give every server of a fleet the same one (from its environment, as
    /// any secret) so that one client's redacted key is the same in all
    /// their logs. `false`, changing nothing, once a redacted form was made
    /// or a secret set: a key's redacted form never changes within a
    /// process.
    pub fn set_redaction_secret(secret: impl AsRef<[u8]>) -> bool {
        let secret = secret.as_ref().to_vec();
        REDACTION_SECRET.set(secret).is_ok()
    }

    /// A hash of the key, the same in every process of one build: an
    /// identity to count a key by, never shown.
    pub(crate) fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.as_bytes().hash(&mut hasher);
        hasher.finish()
    }
}

/// The secret redacted keys are hashed under: set once, or drawn at random
/// the first time one is made.
static REDACTION_SECRET: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

fn redaction_secret() -> &'static [u8] {
    REDACTION_SECRET.get_or_init(|| {
        // std's RandomState is seeded from the operating system's
        // randomness: four of them make a 256-bit secret.
        use std::hash::{BuildHasher, Hasher};
        (0..4u64)
            .flat_map(|i| {
                let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
                hasher.write_u64(i);
                hasher.finish().to_le_bytes()
            })
            .collect()
    })
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Key({}:{})",
            self.namespace(),
            self.value().escape_ascii()
        )
    }
}
