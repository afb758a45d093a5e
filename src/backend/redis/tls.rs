//! `rediss://` beyond the URL (feature `redis-tls`): which authorities
//! verify the server, and the certificate the client shows.
//!
//! Without settings a `rediss://` server is verified against the system's
//! roots. A server whose certificate does not verify is never used: the
//! error says so (`invalid peer certificate: UnknownIssuer`), from
//! [`connect`](super::RedisBackendBuilder::connect), or with
//! [`connect_lazy`](super::RedisBackendBuilder::connect_lazy) from every
//! decision, which the failure rule then answers.

use ::redis::{ClientTlsConfig, TlsCertificates};

/// What a builder was told about TLS; the URL says whether TLS is used.
#[derive(Clone, Default)]
pub(super) struct Tls {
    /// PEM: the authorities to trust instead of the system's.
    pub(super) roots: Option<Vec<u8>>,
    /// PEM: the client's certificate chain and its private key.
    pub(super) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// For the `redis` client, when anything beyond the URL was said.
    pub(super) fn certificates(&self) -> Option<TlsCertificates> {
        if self.roots.is_none() && self.client.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(client_cert, client_key)| ClientTlsConfig {
                    client_cert: client_cert.clone(),
                    client_key: client_key.clone(),
                }),
            root_cert: self.roots.clone(),
        })
    }
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A private key never reaches a log.
        f.debug_struct("Tls")
            .field("roots", &self.roots.as_ref().map(|_| "<pem>"))
            .field("client", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}
