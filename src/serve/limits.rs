//! What bounds the connections a server keeps open: how many, from whom,
//! and what each must send how fast.

use std::fmt;
use std::time::Duration;

use ipnet::IpNet;

/// The bounds [`serve`](super::serve) keeps on connections, built by
/// [`ConnectionLimits::builder`] and checked when built.
///
/// `ConnectionLimits::default()` is what a server on the open internet
/// wants: at most three quarters of the process's limit on open files
/// (`ulimit -n`, at most 10,000), an eighth of those (at most 64) per client
/// address, a request's headers within 10 seconds and 64 KiB.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    pub(super) max_connections: usize,
    pub(super) max_per_client: usize,
    pub(super) per_network: Option<NetworkCap>,
    pub(super) header_timeout: Duration,
    pub(super) max_header_bytes: usize,
    pub(super) uncapped: Vec<IpNet>,
    pub(super) shutdown_grace: Duration,
}

/// A cap per wider network than one client's: its prefix lengths and the
/// connections all of its clients together may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NetworkCap {
    pub(super) v4_prefix: u8,
    pub(super) v6_prefix: u8,
    pub(super) max: usize,
}

/// The header-read timeout when none is set.
const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The bound on a request's header bytes when none is set: eight times
/// what most servers allow.
const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// How long a graceful shutdown waits for requests under way.
const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits::builder()
            .build()
            .expect("the defaults are within every bound")
    }
}

impl ConnectionLimits {
    /// Limits to set one by one; those left unset keep their defaults.
    pub fn builder() -> ConnectionLimitsBuilder {
        ConnectionLimitsBuilder::default()
    }

    /// Connections open at once, from everyone.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Connections open at once from one client: an IPv4 address, or an
    /// IPv6 /64.
    pub fn max_per_client(&self) -> usize {
        self.max_per_client
    }

    /// The cap per wider network, if one is set: its IPv4 and IPv6 prefix
    /// lengths, and its connections.
    pub fn max_per_network(&self) -> Option<(u8, u8, usize)> {
        self.per_network.map(|n| (n.v4_prefix, n.v6_prefix, n.max))
    }

    /// How long a request's headers may take to arrive, counted from the
    /// connection's opening or the end of the response before.
    pub fn header_timeout(&self) -> Duration {
        self.header_timeout
    }

    /// The most bytes of a request's header block.
    pub fn max_header_bytes(&self) -> usize {
        self.max_header_bytes
    }
}

/// Builds [`ConnectionLimits`]; [`build`](Self::build) checks them.
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until built"]
pub struct ConnectionLimitsBuilder {
    max_connections: Option<usize>,
    max_per_client: Option<usize>,
    per_network: Option<NetworkCap>,
    header_timeout: Option<Duration>,
    max_header_bytes: Option<usize>,
    uncapped: Vec<IpNet>,
    shutdown_grace: Option<Duration>,
}

impl ConnectionLimitsBuilder {
    /// Connections open at once, from everyone (default: three quarters of
    /// `ulimit -n`, at most 10,000, so that the process keeps descriptors
    /// for its store, its files and its logs).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = Some(max);
        self
    }

    /// Connections open at once from one client: an IPv4 address, or an
    /// IPv6 /64, what one host is usually given (default: an eighth of
    /// [`max_connections`](Self::max_connections), at most 64; a browser
    /// opens six per host).
    pub fn max_per_client(mut self, max: usize) -> Self {
        self.max_per_client = Some(max);
        self
    }

    /// Also cap the connections of every client in one IPv4 network of
    /// `v4_prefix` bits and one IPv6 network of `v6_prefix` bits, for
    /// clients that rotate addresses within a network they hold (`24, 48,
    /// 256`: a /24 or a /48 holds at most 256). Off by default: clients
    /// behind one carrier's NAT share such networks.
    pub fn max_per_network(mut self, v4_prefix: u8, v6_prefix: u8, max: usize) -> Self {
        self.per_network = Some(NetworkCap {
            v4_prefix,
            v6_prefix,
            max,
        });
        self
    }

    /// How long a request's headers may take to arrive (default 10 s),
    /// counted from the connection's opening or, kept alive, from the end
    /// of the response before: a client that trickles its headers, or
    /// idles between requests, is closed when it runs out.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = Some(timeout);
        self
    }

    /// The most bytes of a request's header block — its request line,
    /// headers and the blank line (default 64 KiB). One more is answered
    /// 431 and the connection closed, whether the block arrives whole or
    /// a byte at a time.
    pub fn max_header_bytes(mut self, max: usize) -> Self {
        self.max_header_bytes = Some(max);
        self
    }

    /// Peers capped only in all, never per client or network: the reverse
    /// proxies in front of the server, whose connections carry many
    /// clients.
    pub fn uncapped(mut self, networks: impl IntoIterator<Item = IpNet>) -> Self {
        self.uncapped.extend(networks);
        self
    }

    /// How long a graceful shutdown waits for requests under way before it
    /// closes their connections (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = Some(grace);
        self
    }

    /// The limits, or what is wrong with them.
    pub fn build(self) -> Result<ConnectionLimits, ConnectionLimitsError> {
        let max_connections = self.max_connections.unwrap_or_else(default_max_connections);
        if max_connections == 0 {
            return Err(ConnectionLimitsError::NoConnections);
        }
        let max_per_client = self
            .max_per_client
            .unwrap_or((max_connections / 8).clamp(1, 64));
        if max_per_client == 0 || max_per_client > max_connections {
            return Err(ConnectionLimitsError::PerClient {
                max_per_client,
                max_connections,
            });
        }
        if let Some(network) = self.per_network {
            if !(1..32).contains(&network.v4_prefix) || !(1..64).contains(&network.v6_prefix) {
                return Err(ConnectionLimitsError::NetworkPrefix {
                    v4_prefix: network.v4_prefix,
                    v6_prefix: network.v6_prefix,
                });
            }
            if network.max < max_per_client || network.max > max_connections {
                return Err(ConnectionLimitsError::PerNetwork {
                    max_per_network: network.max,
                    max_per_client,
                    max_connections,
                });
            }
        }
        let header_timeout = self.header_timeout.unwrap_or(DEFAULT_HEADER_TIMEOUT);
        if header_timeout < Duration::from_millis(1) || header_timeout > Duration::from_secs(3600) {
            return Err(ConnectionLimitsError::HeaderTimeout(header_timeout));
        }
        let max_header_bytes = self.max_header_bytes.unwrap_or(DEFAULT_MAX_HEADER_BYTES);
        if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&max_header_bytes) {
            return Err(ConnectionLimitsError::HeaderBytes(max_header_bytes));
        }
        let shutdown_grace = self.shutdown_grace.unwrap_or(DEFAULT_SHUTDOWN_GRACE);
        if shutdown_grace > Duration::from_secs(3600) {
            return Err(ConnectionLimitsError::ShutdownGrace(shutdown_grace));
        }
        Ok(ConnectionLimits {
            max_connections,
            max_per_client,
            per_network: self.per_network,
            header_timeout,
            max_header_bytes,
            uncapped: self.uncapped,
            shutdown_grace,
        })
    }
}

/// The bounds of [`ConnectionLimitsBuilder::max_header_bytes`]: a request
/// line and a few headers at least, and no more than a megabyte.
const MIN_HEADER_BYTES: usize = 1024;
const MAX_HEADER_BYTES: usize = 1024 * 1024;

/// What is wrong with a [`ConnectionLimitsBuilder`]'s settings.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionLimitsError {
    /// `max_connections(0)`: no connection could ever be served.
    NoConnections,
    /// The cap per client is 0, or above the cap in all.
    PerClient {
        /// The cap per client asked for.
        max_per_client: usize,
        /// The cap in all.
        max_connections: usize,
    },
    /// A network's prefix is no wider than one client's (IPv4: 1 to 31
    /// bits; IPv6: 1 to 63).
    NetworkPrefix {
        /// The IPv4 prefix length asked for.
        v4_prefix: u8,
        /// The IPv6 prefix length asked for.
        v6_prefix: u8,
    },
    /// The cap per network is below the cap per client, or above the cap
    /// in all.
    PerNetwork {
        /// The cap per network asked for.
        max_per_network: usize,
        /// The cap per client.
        max_per_client: usize,
        /// The cap in all.
        max_connections: usize,
    },
    /// A header timeout under a millisecond or over an hour.
    HeaderTimeout(Duration),
    /// A bound on header bytes under 1 KiB or over 1 MiB.
    HeaderBytes(usize),
    /// A shutdown grace over an hour.
    ShutdownGrace(Duration),
}

impl fmt::Display for ConnectionLimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoConnections => write!(f, "max_connections is 0: no connection could be served"),
            Self::PerClient {
                max_per_client,
                max_connections,
            } => write!(
                f,
                "max_per_client is {max_per_client}: it must be from 1 to max_connections ({max_connections})"
            ),
            Self::NetworkPrefix {
                v4_prefix,
                v6_prefix,
            } => write!(
                f,
                "max_per_network's prefixes are /{v4_prefix} and /{v6_prefix}: a network is wider than one client, /1 to /31 for IPv4 and /1 to /63 for IPv6"
            ),
            Self::PerNetwork {
                max_per_network,
                max_per_client,
                max_connections,
            } => write!(
                f,
                "max_per_network is {max_per_network}: it must be from max_per_client ({max_per_client}) to max_connections ({max_connections})"
            ),
            Self::HeaderTimeout(timeout) => write!(
                f,
                "header_timeout is {timeout:?}: it must be from 1 ms to 1 hour"
            ),
            Self::HeaderBytes(bytes) => write!(
                f,
                "max_header_bytes is {bytes}: it must be from {MIN_HEADER_BYTES} to {MAX_HEADER_BYTES}"
            ),
            Self::ShutdownGrace(grace) => {
                write!(f, "shutdown_grace is {grace:?}: it must be at most 1 hour")
            }
        }
    }
}

impl std::error::Error for ConnectionLimitsError {}

/// Three quarters of the process's soft limit on open files (1,024 where it
/// cannot be read), from 16 to 10,000.
fn default_max_connections() -> usize {
    let soft_limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        })
        .unwrap_or(1024);
    (soft_limit / 4 * 3).clamp(16, 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bad_setting_is_named() {
        let cases: [(ConnectionLimitsBuilder, &str); 8] = [
            (
                ConnectionLimits::builder().max_connections(0),
                "max_connections is 0",
            ),
            (
                ConnectionLimits::builder()
                    .max_connections(10)
                    .max_per_client(11),
                "max_per_client is 11",
            ),
            (
                ConnectionLimits::builder().max_per_client(0),
                "max_per_client is 0",
            ),
            (
                ConnectionLimits::builder().max_per_network(32, 48, 100),
                "prefixes are /32 and /48",
            ),
            (
                ConnectionLimits::builder().max_per_network(24, 64, 100),
                "prefixes are /24 and /64",
            ),
            (
                ConnectionLimits::builder()
                    .max_connections(100)
                    .max_per_client(10)
                    .max_per_network(24, 48, 9),
                "max_per_network is 9",
            ),
            (
                ConnectionLimits::builder().max_header_bytes(100),
                "max_header_bytes is 100",
            ),
            (
                ConnectionLimits::builder().header_timeout(Duration::ZERO),
                "header_timeout is 0ns",
            ),
        ];
        for (builder, named) in cases {
            let error = builder.build().unwrap_err().to_string();
            assert!(error.contains(named), "{error:?} does not say {named:?}");
        }
    }

    #[test]
    fn the_cap_per_client_follows_the_cap_in_all() {
        let limits = ConnectionLimits::builder()
            .max_connections(200)
            .build()
            .unwrap();
        assert_eq!(
            (limits.max_connections(), limits.max_per_client()),
            (200, 25)
        );
        let limits = ConnectionLimits::builder()
            .max_connections(4)
            .build()
            .unwrap();
        assert_eq!(limits.max_per_client(), 1);
        let limits = ConnectionLimits::default();
        assert!((16..=10_000).contains(&limits.max_connections()));
        assert!(limits.max_per_client() <= 64);
        assert_eq!(limits.max_per_network(), None);
    }
}
