//! What the environment configures: `ADDR`, `REDIS_URL`, `ALGORITHM`, the failure rule, lists, the admin token, Redis's key format.

use super::*;

/// What the environment configures.
#[derive(Clone, Debug)]
pub struct Config {
    /// `ALGORITHM`: the algorithm of every limit (default sliding-window).
    pub algorithm: Algorithm,
    /// `TRUSTED_PROXIES`: comma-separated CIDRs (default none).
    pub trusted_proxies: Vec<IpNet>,
    /// `ON_STORE_FAILURE`: what decides while Redis is down (default local).
    pub on_store_failure: StoreFailure,
    /// `STORE_TIMEOUT_MS`: how long a Redis decision may take (default 50).
    pub store_timeout: std::time::Duration,
    /// `SERVERS`: how many servers share the limits; while Redis is down,
    /// each enforces its share (default 1).
    pub servers: u32,
    /// `SHADOW=1`: every limit in shadow mode.
    pub shadow: bool,
    /// `DENY_CIDRS`: clients refused with 403.
    pub deny_cidrs: Vec<IpNet>,
    /// `ALLOW_CIDRS`: clients never limited.
    pub allow_cidrs: Vec<IpNet>,
    /// `ADMIN_TOKEN`: when set, limits can be replaced over HTTP with it.
    pub admin_token: Option<String>,
    /// `LEASED=1`: on Redis, every limit is leased (shares for `SERVERS`).
    pub leased: bool,
    /// `REQUEST_TIMEOUT_MS`: how long a client may take to send a request's
    /// headers (or to start the next one on a kept-alive connection) and a
    /// body the server reads (default 10,000).
    pub request_timeout: std::time::Duration,
    /// `METRICS_ADDR`: serve `/metrics` on this address only (for a scraper
    /// on an internal network), not on the public one.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// `REDIS_CA_FILE`: a PEM file of the authorities that verify a
    /// `rediss://` server (default: the system's roots).
    pub redis_ca_file: Option<std::path::PathBuf>,
    /// `REDIS_CLIENT_CERT` and `REDIS_CLIENT_KEY`: PEM files of the client
    /// certificate a `rediss://` server requires (mutual TLS); both or none.
    pub redis_client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `LIMITS_FILE`: the routes' limits, from this file (watched), not the
    /// built-in `examples/limits.toml`.
    pub limits_file: Option<std::path::PathBuf>,
    /// `ADAPTIVE_WINDOW_MS`: the window `/api/report`'s adaptive limit
    /// looks back over (default 10,000; shorter for a quick demo).
    pub adaptive_window: std::time::Duration,
    /// `REDIS_KEY_FORMAT`: `compact` (the default), or `packed` or
    /// `packed:<shards>`, many clients' states in one hash. Every server
    /// sharing a Redis must say the same.
    pub redis_key_format: RedisKeyFormat,
    /// `REDIS_BATCH`: `on` (the default) sends decisions in flight at the
    /// same moment to Redis in one call (`RedisBackendBuilder::max_batch`);
    /// `off`, each in a call of its own.
    pub redis_batch: bool,
    /// `SHARED_CAPACITY`: `/api/shared`'s capacity per second, shared by
    /// every tenant.
    pub shared_capacity: u32,
    /// `SHARED_PER_IP`: requests per second one client address may ask of
    /// `/api/shared` (default 100, half the default capacity), checked
    /// before the capacity: what one client inventing tenant ids can ask
    /// at most.
    pub shared_per_ip: u32,
    /// `SHARED_TENANTS_PER_IP`: tenants one client address may bring to
    /// `/api/shared` every 2 s (default 4; see `tenants.rs`): what bounds
    /// the made-up tenant ids one address dilutes the shares with.
    pub shared_tenants_per_ip: u32,
    /// `IDS_PER_IP`: requests per second one client address may send to
    /// the routes keyed by an id it chooses (default 200): what bounds how
    /// fast it can make new keys.
    pub ids_per_ip: u32,
    /// What bounds connections (`tower_ratelimit::serve`):
    /// `MAX_CONNECTIONS` open at once (default: three quarters of `ulimit
    /// -n`, at most 10,000), `MAX_CONNECTIONS_PER_CLIENT` from one client
    /// address (IPv6: one /64; default an eighth of `MAX_CONNECTIONS`, at
    /// most 64), `MAX_CONNECTIONS_PER_NETWORK` from one /24 or /48 (default
    /// none), `TRUSTED_PROXIES` capped only in all, headers within
    /// `REQUEST_TIMEOUT_MS`.
    pub connections: ConnectionLimits,
    /// `MAX_KEYS`: the memory backend's cap on states (default
    /// `MemoryBackend::DEFAULT_MAX_KEYS`); bans and exhausted budgets are
    /// the last evicted at it.
    pub max_keys: usize,
}

/// The Redis key format the server was told to use (told here rather than
/// as the crate's `KeyFormat`, which exists only with its `redis` feature).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisKeyFormat {
    Compact,
    /// Over the given shards, or the crate's default count (`None`).
    Packed(Option<std::num::NonZeroU16>),
}

/// What decides while the store is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFailure {
    /// Each server's memory, to its share of each limit.
    Local,
    /// Nothing: requests pass unlimited.
    Open,
    /// Nothing: requests are refused with 503.
    Closed,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::SlidingWindow,
            trusted_proxies: Vec::new(),
            on_store_failure: StoreFailure::Local,
            store_timeout: std::time::Duration::from_millis(50),
            servers: 1,
            shadow: false,
            deny_cidrs: Vec::new(),
            allow_cidrs: Vec::new(),
            admin_token: None,
            leased: false,
            request_timeout: std::time::Duration::from_secs(10),
            metrics_addr: None,
            redis_ca_file: None,
            redis_client_cert: None,
            limits_file: None,
            adaptive_window: std::time::Duration::from_secs(10),
            redis_key_format: RedisKeyFormat::Compact,
            redis_batch: true,
            shared_capacity: 200,
            shared_per_ip: 100,
            shared_tenants_per_ip: 4,
            ids_per_ip: 200,
            connections: ConnectionLimits::default(),
            max_keys: MemoryBackend::DEFAULT_MAX_KEYS,
        }
    }
}

/// `name`'s comma-separated networks.
pub(super) fn networks(name: &str) -> Result<Vec<IpNet>, String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|e| format!("{name}: {s:?}: {e}")))
        .collect()
}

/// `name`'s value parsed, or `default` when it is unset.
pub(super) fn env_or<T>(
    name: &str,
    default: T,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, String> {
    match std::env::var(name) {
        Ok(text) => parse(text.trim()).ok_or_else(|| format!("{name}: {text:?} is not valid")),
        Err(_) => Ok(default),
    }
}

/// A rate a second read from `name`: 1 to 1,000,000, the finest a quota
/// holds (one a microsecond).
fn per_second(name: &str, default: u32) -> Result<u32, String> {
    let valid = |n: &u32| tower_ratelimit::Quota::per_second(*n).is_ok();
    env_or(name, default, |v| v.parse().ok().filter(valid))
        .map_err(|e| format!("{e} (a rate a second: 1 to 1000000)"))
}

/// A number of tenants each 2 s, `name` in the environment.
fn tenants_per_period(name: &str, default: u32) -> Result<u32, String> {
    env_or(name, default, |v| {
        v.parse().ok().filter(|n| (1..=1_000_000).contains(n))
    })
    .map_err(|e| format!("{e} (tenants each 2 s: 1 to 1000000)"))
}

impl Config {
    /// Read the environment, with a clear error for bad values.
    pub fn from_env() -> Result<Self, String> {
        let algorithm = match std::env::var("ALGORITHM") {
            Ok(name) => name.parse().map_err(|e| format!("ALGORITHM: {e}"))?,
            Err(_) => Algorithm::SlidingWindow,
        };
        let trusted_proxies = networks("TRUSTED_PROXIES")?;
        let on_store_failure = env_or("ON_STORE_FAILURE", StoreFailure::Local, |v| match v {
            "local" => Some(StoreFailure::Local),
            "open" => Some(StoreFailure::Open),
            "closed" => Some(StoreFailure::Closed),
            _ => None,
        })
        .map_err(|e| format!("{e} (expected local, open or closed)"))?;
        let store_timeout = env_or("STORE_TIMEOUT_MS", 50, |v| v.parse().ok())?;
        let servers = env_or("SERVERS", 1, |v| v.parse().ok().filter(|n| *n > 0))?;
        let flag = |v: &str| match v {
            "1" | "true" => Some(true),
            "0" | "false" | "" => Some(false),
            _ => None,
        };
        let shadow = env_or("SHADOW", false, flag)?;
        let leased = env_or("LEASED", false, flag)?;
        let admin_token = std::env::var("ADMIN_TOKEN").ok().filter(|t| !t.is_empty());
        let request_timeout = env_or("REQUEST_TIMEOUT_MS", 10_000, |v| {
            v.parse().ok().filter(|ms| *ms > 0)
        })?;
        let request_timeout = std::time::Duration::from_millis(request_timeout);
        Ok(Self {
            algorithm,
            connections: connection_limits(&trusted_proxies, request_timeout)?,
            trusted_proxies,
            on_store_failure,
            store_timeout: std::time::Duration::from_millis(store_timeout),
            servers,
            shadow,
            deny_cidrs: networks("DENY_CIDRS")?,
            allow_cidrs: networks("ALLOW_CIDRS")?,
            admin_token,
            leased,
            request_timeout,
            metrics_addr: match std::env::var("METRICS_ADDR") {
                Ok(addr) => Some(addr.parse().map_err(|e| format!("METRICS_ADDR: {e}"))?),
                Err(_) => None,
            },
            redis_ca_file: std::env::var_os("REDIS_CA_FILE").map(Into::into),
            redis_client_cert: match (
                std::env::var_os("REDIS_CLIENT_CERT"),
                std::env::var_os("REDIS_CLIENT_KEY"),
            ) {
                (Some(cert), Some(key)) => Some((cert.into(), key.into())),
                (None, None) => None,
                _ => return Err("REDIS_CLIENT_CERT and REDIS_CLIENT_KEY go together".into()),
            },
            adaptive_window: std::time::Duration::from_millis(env_or(
                "ADAPTIVE_WINDOW_MS",
                10_000,
                |v| v.parse().ok().filter(|ms| *ms >= 100),
            )?),
            limits_file: std::env::var_os("LIMITS_FILE")
                .filter(|p| !p.is_empty())
                .map(Into::into),
            shared_capacity: per_second("SHARED_CAPACITY", 200)?,
            shared_per_ip: per_second("SHARED_PER_IP", 100)?,
            shared_tenants_per_ip: tenants_per_period("SHARED_TENANTS_PER_IP", 4)?,
            ids_per_ip: per_second("IDS_PER_IP", 200)?,
            redis_key_format: env_or("REDIS_KEY_FORMAT", RedisKeyFormat::Compact, |v| match v {
                "compact" => Some(RedisKeyFormat::Compact),
                "packed" => Some(RedisKeyFormat::Packed(None)),
                _ => Some(RedisKeyFormat::Packed(Some(
                    v.strip_prefix("packed:")?.parse().ok()?,
                ))),
            })
            .map_err(|e| {
                format!("{e} (expected compact, packed or packed:<shards>, 1 to 65535)")
            })?,
            redis_batch: env_or("REDIS_BATCH", true, |v| match v {
                "on" => Some(true),
                "off" => Some(false),
                _ => None,
            })
            .map_err(|e| format!("{e} (expected on or off)"))?,
            max_keys: env_or("MAX_KEYS", MemoryBackend::DEFAULT_MAX_KEYS, |v| {
                v.parse().ok().filter(|n| *n > 0)
            })?,
        })
    }
}

/// The bounds on connections the environment sets; those it leaves unset
/// keep `ConnectionLimits`' defaults.
fn connection_limits(
    trusted_proxies: &[IpNet],
    request_timeout: std::time::Duration,
) -> Result<ConnectionLimits, String> {
    let count = |name: &str| -> Result<Option<usize>, String> {
        env_or(name, None, |v| v.parse().ok().filter(|n| *n > 0).map(Some))
    };
    let mut limits = ConnectionLimits::builder()
        .header_timeout(request_timeout)
        .uncapped(trusted_proxies.iter().copied());
    if let Some(max) = count("MAX_CONNECTIONS")? {
        limits = limits.max_connections(max);
    }
    if let Some(max) = count("MAX_CONNECTIONS_PER_CLIENT")? {
        limits = limits.max_per_client(max);
    }
    if let Some(max) = count("MAX_CONNECTIONS_PER_NETWORK")? {
        limits = limits.max_per_network(24, 48, max);
    }
    limits.build().map_err(|e| {
        let name = match e {
            ConnectionLimitsError::PerClient { .. } => "MAX_CONNECTIONS_PER_CLIENT",
            ConnectionLimitsError::PerNetwork { .. } => "MAX_CONNECTIONS_PER_NETWORK",
            ConnectionLimitsError::HeaderTimeout(_) => "REQUEST_TIMEOUT_MS",
            _ => "MAX_CONNECTIONS",
        };
        format!("{name}: {e}")
    })
}
