//! A key from the client's IP address, through trusted proxies only.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use ipnet::IpNet;

use super::{Key, KeyError, KeyExtractor};
use crate::key::RequestHead;

/// Entries of a forwarding header examined at most, from the right: bounded
/// work whatever a client sends.
const MAX_HOPS: usize = 32;

/// The peer address of a connection, for servers that are not axum: put it
/// in the request extensions (axum's `ConnectInfo<SocketAddr>` and a plain
/// `SocketAddr` extension are read too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Which header the trusted proxies in front of the service set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
    /// `X-Real-IP: client` (one address, set by the last proxy).
    XRealIp,
}

#[derive(Clone, Debug)]
enum Trust {
    Nobody,
    Networks(Arc<[IpNet]>),
    Hops(usize),
}

/// Keys each request by the client's IP address.
///
/// The address is the connection's peer unless proxies are trusted. A
/// forwarding header is read only when the peer is a trusted proxy, and only
/// the one header those proxies set: otherwise any client could claim any
/// address. Walking that header from the right, the client is the first
/// address not in a trusted network (or, with [`trust_hops`](Self::trust_hops),
/// the address that many hops back).
///
/// IPv6 clients are grouped by prefix (default /64, what one customer usually
/// gets), and IPv4-mapped IPv6 addresses count as the IPv4 address.
///
/// ```
/// use std::net::SocketAddr;
/// use tower_ratelimit::key::{ClientIp, KeyExtractor, PeerAddr};
/// use tower_ratelimit::key::RequestHead;
///
/// let key = ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()]);
/// let mut req = http::Request::get("/")
///     .header("x-forwarded-for", "203.0.113.9, 10.0.0.2")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.1:443".parse().unwrap()));
/// let k = key.extract(&RequestHead::from(&req)).unwrap();
/// assert_eq!(k.value(), [203, 0, 113, 9]);
/// ```
#[derive(Clone, Debug)]
pub struct ClientIp {
    trust: Trust,
    header: ForwardedHeader,
    ipv6_prefix: u8,
}

impl Default for ClientIp {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientIp {
    /// The peer address; no proxy trusted.
    pub fn new() -> Self {
        Self {
            trust: Trust::Nobody,
            header: ForwardedHeader::default(),
            ipv6_prefix: 64,
        }
    }

    /// Trust proxies whose addresses are in `networks`.
    pub fn trust_networks(mut self, networks: impl IntoIterator<Item = IpNet>) -> Self {
        let networks: Arc<[IpNet]> = networks.into_iter().collect();
        self.trust = if networks.is_empty() {
            Trust::Nobody
        } else {
            Trust::Networks(networks)
        };
        self
    }

    /// Trust exactly `hops` proxies in front of the service, whatever their
    /// addresses: the client is the address `hops` entries from the right of
    /// the header (the last proxy is the peer).
    ///
    /// The header is read from the right up to the first entry that is no
    /// address (what lies left of it cannot be trusted). A request without
    /// the header, or with none readable, is the peer's — the last
    /// proxy's: every such request shares its budget, so configure the
    /// proxies to always set it. With fewer readable entries than `hops`,
    /// the leftmost one read is the client.
    ///
    /// ```
    /// use tower_ratelimit::key::{ClientIp, PeerAddr, RequestHead};
    ///
    /// let two_proxies = ClientIp::new().trust_hops(2);
    /// let client = |forwarded: Option<&str>| {
    ///     let mut req = http::Request::get("/");
    ///     if let Some(forwarded) = forwarded {
    ///         req = req.header("x-forwarded-for", forwarded);
    ///     }
    ///     let mut req = req.body(()).unwrap();
    ///     req.extensions_mut().insert(PeerAddr("10.0.0.2:443".parse().unwrap()));
    ///     two_proxies.client_addr(&RequestHead::from(&req)).unwrap().to_string()
    /// };
    /// // The client, then the first proxy, appended by the first and second.
    /// assert_eq!(client(Some("198.51.100.7, 203.0.113.9, 10.0.0.1")), "203.0.113.9");
    /// // No header: the last proxy, the peer, whose budget such requests share.
    /// assert_eq!(client(None), "10.0.0.2");
    /// // What a client wrote that is no address stops the reading there.
    /// assert_eq!(client(Some("not an address, 203.0.113.9, 10.0.0.1")), "203.0.113.9");
    /// assert_eq!(client(Some("not an address")), "10.0.0.2");
    /// ```
    pub fn trust_hops(mut self, hops: usize) -> Self {
        self.trust = if hops == 0 {
            Trust::Nobody
        } else {
            Trust::Hops(hops)
        };
        self
    }

    /// The header the trusted proxies set (default `X-Forwarded-For`).
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Group IPv6 clients by this prefix length (0 to 128; default 64).
    pub fn ipv6_prefix(mut self, len: u8) -> Self {
        self.ipv6_prefix = len.min(128);
        self
    }

    /// The key of a client at `ip` (an IPv6 address cut to the prefix):
    /// for per-key policies and lists, without a request.
    pub fn key_of(&self, ip: IpAddr) -> Key {
        match canonical(ip) {
            IpAddr::V4(v4) => Key::new("ip", v4.octets()),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.ipv6_prefix))
                    .unwrap_or(0);
                Key::new("ip", Ipv6Addr::from(bits & mask).octets())
            }
        }
    }

    /// The client's address for this request.
    pub fn client_addr(&self, req: &RequestHead<'_>) -> Result<IpAddr, KeyError> {
        let peer = peer_addr(req).ok_or(KeyError::NoPeerAddress)?;
        let peer = canonical(peer);
        let (networks, hops) = match &self.trust {
            Trust::Nobody => return Ok(peer),
            Trust::Networks(networks) if !trusted(networks, peer) => return Ok(peer),
            Trust::Networks(networks) => (Some(&**networks), 0),
            Trust::Hops(hops) => (None, *hops),
        };
        let chain = self.chain(req);
        if chain.is_empty() {
            // A trusted proxy that forwarded nothing: the proxy is the client.
            return Ok(peer);
        }
        Ok(match networks {
            Some(networks) => chain
                .iter()
                .rev()
                .copied()
                .find(|ip| !trusted(networks, *ip))
                .unwrap_or(chain[0]),
            // With n proxies the peer is the n-th; the n−1 before it appended
            // themselves, so the client is n entries from the right.
            None => chain[chain.len().saturating_sub(hops)],
        })
    }

    /// The addresses in the forwarding header, oldest first: at most
    /// [`MAX_HOPS`] from the right, stopping at the first that is not an
    /// address (what lies beyond it cannot be trusted).
    fn chain(&self, req: &RequestHead<'_>) -> Vec<IpAddr> {
        let name = match self.header {
            ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardedHeader::Forwarded => FORWARDED,
            ForwardedHeader::XRealIp => HeaderName::from_static("x-real-ip"),
        };
        // Entries are split on raw bytes: a client's garbage (even non-UTF-8)
        // in its own entry must not hide the entries our proxies appended.
        // Walked from the right, so only the last MAX_HOPS are ever looked at.
        let entries = req
            .headers
            .get_all(&name)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','));
        let mut chain: Vec<IpAddr> = Vec::new();
        for entry in entries.rev().take(MAX_HOPS) {
            let parsed = std::str::from_utf8(entry)
                .ok()
                .and_then(|entry| match self.header {
                    ForwardedHeader::Forwarded => parse_forwarded_for(entry),
                    _ => parse_addr(entry.trim()),
                });
            match parsed {
                Some(ip) => chain.push(canonical(ip)),
                None => break,
            }
        }
        if self.header == ForwardedHeader::XRealIp {
            chain.truncate(1);
        }
        chain.reverse();
        chain
    }
}

impl KeyExtractor for ClientIp {
    // Inlined into the layer's call: the key is built where it is kept.
    #[inline]
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        // Trusting no proxy (the default), the peer is the client: its
        // address is read and keyed in place.
        let ip = match self.trust {
            Trust::Nobody => peer_addr(req).ok_or(KeyError::NoPeerAddress)?,
            _ => self.client_addr(req)?,
        };
        Ok(self.key_of(ip))
    }
}

#[inline]
fn peer_addr(req: &RequestHead<'_>) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = req
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0.ip());
    }
    req.extensions
        .get::<PeerAddr>()
        .map(|p| p.0.ip())
        .or_else(|| req.extensions.get::<SocketAddr>().map(SocketAddr::ip))
}

fn trusted(networks: &[IpNet], ip: IpAddr) -> bool {
    networks.iter().any(|n| n.contains(&ip))
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as IPv4.
/// `ip`, or the IPv4 address an IPv4-mapped IPv6 address carries: one
/// client, however its address reached us.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// An address, optionally with a port (`1.2.3.4:80`, `[::1]:80`).
fn parse_addr(s: &str) -> Option<IpAddr> {
    IpAddr::from_str(s)
        .ok()
        .or_else(|| SocketAddr::from_str(s).ok().map(|a| a.ip()))
        .or_else(|| {
            let inner = s.strip_prefix('[')?.strip_suffix(']')?;
            Ipv6Addr::from_str(inner).ok().map(IpAddr::V6)
        })
}

/// The `for=` parameter of one `Forwarded` element.
fn parse_forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        parse_addr(value)
    })
}
