//! [`AccessLists`]: clients that are never limited, and clients that are
//! always refused.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::key::RequestHead;
use crate::key::{ClientIp, Key};

/// Allow and deny lists, by client IP network and by key.
///
/// A denied client gets `403 Forbidden` and an allowed one passes unlimited
/// (without quota headers); neither touches the backend. A deny entry wins
/// over an allow entry. Lists are checked before anything else the layer
/// does, on every request it sees; the key lists need the request's key,
/// so a request without one is only matched by IP. Give the layer a
/// [`Live`](crate::Live) handle to replace the lists at runtime.
///
/// ```
/// use tower_ratelimit::key::{ClientIp, Key};
/// use tower_ratelimit::{Policy, RateLimitLayer};
/// use tower_ratelimit::layer::AccessLists;
///
/// let lists = AccessLists::new()
///     .deny_network("203.0.113.0/24".parse().unwrap())
///     .allow_network("10.0.0.0/8".parse().unwrap())
///     .allow_key(Key::new("ip", "192.0.2.1"))
///     .client_ip(ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()]));
/// let layer = RateLimitLayer::new("100/min".parse::<Policy>().unwrap()).lists(lists);
/// ```
#[derive(Clone, Debug, Default)]
pub struct AccessLists {
    allow_networks: Vec<IpNet>,
    deny_networks: Vec<IpNet>,
    allow_keys: HashSet<Key>,
    deny_keys: HashSet<Key>,
    client_ip: ClientIp,
}

/// Which list a request is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Listed {
    Allowed,
    Denied,
}

impl AccessLists {
    /// Empty lists, matching by the peer address ([`ClientIp::new`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Never limit clients in `network`.
    pub fn allow_network(mut self, network: IpNet) -> Self {
        self.allow_networks.push(network.trunc());
        self
    }

    /// Refuse clients in `network`.
    pub fn deny_network(mut self, network: IpNet) -> Self {
        self.deny_networks.push(network.trunc());
        self
    }

    /// Never limit requests with `key` (as the layer's key extractor makes it).
    pub fn allow_key(mut self, key: Key) -> Self {
        self.allow_keys.insert(key);
        self
    }

    /// Refuse requests with `key`.
    pub fn deny_key(mut self, key: Key) -> Self {
        self.deny_keys.insert(key);
        self
    }

    /// Find the client's IP with `client_ip` (trusted proxies and all),
    /// instead of the peer address.
    pub fn client_ip(mut self, client_ip: ClientIp) -> Self {
        self.client_ip = client_ip;
        self
    }

    /// Whether the lists hold any key.
    pub(super) fn has_keys(&self) -> bool {
        !self.allow_keys.is_empty() || !self.deny_keys.is_empty()
    }

    /// The client's IP, if the network lists need it and it can be found.
    pub(super) fn ip_of(&self, req: &RequestHead<'_>) -> Option<IpAddr> {
        if self.allow_networks.is_empty() && self.deny_networks.is_empty() {
            return None;
        }
        self.client_ip.client_addr(req).ok()
    }

    /// The list the request is on, by its IP and its key; deny wins.
    pub(super) fn find(&self, ip: Option<IpAddr>, key: Option<&Key>) -> Option<Listed> {
        let in_networks =
            |networks: &[IpNet]| ip.is_some_and(|ip| networks.iter().any(|n| n.contains(&ip)));
        let in_keys = |keys: &HashSet<Key>| key.is_some_and(|k| keys.contains(k));
        if in_networks(&self.deny_networks) || in_keys(&self.deny_keys) {
            Some(Listed::Denied)
        } else if in_networks(&self.allow_networks) || in_keys(&self.allow_keys) {
            Some(Listed::Allowed)
        } else {
            None
        }
    }
}
