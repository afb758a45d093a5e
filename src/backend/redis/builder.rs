//! [`RedisBackendBuilder`]: where Redis is, and how to reach it.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::batch::{Batches, MAX_BATCH};
use super::connection::{connection_info, Connection, Open};
#[cfg(feature = "config")]
use super::control::Listen;
use super::leases::Leases;
use super::link::Link;
use super::script::{KeyFormat, KeyNames};
use super::RedisBackend;
use crate::backend::denials::Denials;
use crate::backend::health::{HealthTracker, OnChange};
use crate::backend::{Backend, BackendError, Breaker, Fallback, MemoryBackend, StoreHealth};

/// Configures a [`RedisBackend`].
#[derive(Debug, Clone)]
#[must_use]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub struct RedisBackendBuilder {
    topology: Topology,
    prefix: String,
    key_format: KeyFormat,
    pub(super) timeout: Duration,
    cached_denials: usize,
    leased_by: Option<u32>,
    max_batch: usize,
    #[cfg(feature = "redis-tls")]
    pub(super) tls: super::tls::Tls,
    on_health_change: Option<OnChange>,
}

/// Where Redis is: one server, a cluster's nodes, the sentinels that name
/// a master, or a client or connection the user built.
#[derive(Clone)]
enum Topology {
    Standalone(String),
    #[cfg(feature = "redis-cluster")]
    Cluster(Vec<String>),
    #[cfg(feature = "redis-sentinel")]
    Sentinel(super::url::SentinelUrl),
    Client(Box<::redis::Client>),
    Manager(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    ClusterConnection(::redis::cluster_async::ClusterConnection),
    /// A URL that cannot be used, and why: said by `connect`.
    Unusable(String),
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Topology::Standalone(url) => write!(f, "Standalone({})", super::url::redacted(url)),
            #[cfg(feature = "redis-cluster")]
            Topology::Cluster(nodes) => f
                .debug_tuple("Cluster")
                .field(
                    &nodes
                        .iter()
                        .map(|n| super::url::redacted(n))
                        .collect::<Vec<_>>(),
                )
                .finish(),
            #[cfg(feature = "redis-sentinel")]
            Topology::Sentinel(url) => f.debug_tuple("Sentinel").field(url).finish(),
            Topology::Client(_) => f.write_str("Client"),
            Topology::Manager(_) => f.write_str("ConnectionManager"),
            #[cfg(feature = "redis-cluster")]
            Topology::ClusterConnection(_) => f.write_str("ClusterConnection"),
            Topology::Unusable(why) => f.debug_tuple("Unusable").field(why).finish(),
        }
    }
}

/// How a backend is configured: the entry points, each a builder.
impl RedisBackend {
    /// Configure a backend on the Redis that `url` names: one server
    /// (`redis://[user:password@]host:port/db`, `rediss://` for TLS), a
    /// cluster (`redis+cluster://host:port,host:port`, or a comma-separated
    /// list of URLs), or the master Redis Sentinel names
    /// (`redis+sentinel://host:port,host:port/master-name`,
    /// `rediss+sentinel://`). A URL that cannot be used is an error from
    /// [`connect`](RedisBackendBuilder::connect) that says why.
    pub fn builder(url: &str) -> RedisBackendBuilder {
        RedisBackendBuilder::from_url(url)
    }

    /// Configure a backend on a client you built (any setting the `redis`
    /// crate offers); it is connected through a connection manager.
    pub fn builder_from_client(client: ::redis::Client) -> RedisBackendBuilder {
        RedisBackendBuilder::client(client)
    }

    /// Configure a backend on a connection manager you built. Its own
    /// settings (timeouts, retries) stay as you made them.
    pub fn builder_from_connection(manager: ConnectionManager) -> RedisBackendBuilder {
        RedisBackendBuilder::manager(manager)
    }

    /// Configure a backend on a cluster connection you built.
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub fn builder_from_cluster(
        connection: ::redis::cluster_async::ClusterConnection,
    ) -> RedisBackendBuilder {
        RedisBackendBuilder::cluster_connection(connection)
    }

    /// Configure a backend on the Redis Cluster these nodes belong to.
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub fn cluster_builder(
        nodes: impl IntoIterator<Item = impl Into<String>>,
    ) -> RedisBackendBuilder {
        RedisBackendBuilder::cluster(nodes.into_iter().map(Into::into).collect())
    }

    /// Configure a backend on the master that these Redis Sentinel nodes
    /// (`host:port` each) name `master`, following it through failovers.
    #[cfg(feature = "redis-sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-sentinel")))]
    pub fn sentinel_builder(
        sentinels: impl IntoIterator<Item = impl AsRef<str>>,
        master: &str,
    ) -> RedisBackendBuilder {
        let hosts: Vec<String> = sentinels
            .into_iter()
            .map(|s| s.as_ref().to_owned())
            .collect();
        RedisBackendBuilder::from_url(&format!("redis+sentinel://{}/{master}", hosts.join(",")))
    }
}

#[cfg(feature = "redis-tls")]
impl RedisBackendBuilder {
    /// Verify a `rediss://` server against these authorities (PEM, one or
    /// more certificates) instead of the system's roots: a private CA, as
    /// managed Redis services and self-hosted TLS use.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use tower_ratelimit::backend::RedisBackend;
    ///
    /// let redis = RedisBackend::builder("rediss://limiter:secret@redis.internal:6380")
    ///     .tls_root_certificates(std::fs::read("/etc/redis/ca.pem")?)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.roots = Some(pem.into());
        self
    }

    /// Show this certificate chain and private key (PEM) to a `rediss://`
    /// server that requires clients to have one (mutual TLS).
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
    pub fn tls_client_certificate(
        mut self,
        chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((chain_pem.into(), key_pem.into()));
        self
    }
}

impl RedisBackendBuilder {
    /// The topology `url` names (see the `url` module for the forms).
    pub(super) fn from_url(url: &str) -> Self {
        use super::url::Target;
        Self::new(match super::url::parse(url) {
            Ok(Target::Standalone(url)) => Topology::Standalone(url),
            #[cfg(feature = "redis-cluster")]
            Ok(Target::Cluster(nodes)) => Topology::Cluster(nodes),
            #[cfg(not(feature = "redis-cluster"))]
            Ok(Target::Cluster(_)) => Topology::Unusable(
                "the URL names a Redis Cluster: build with the redis-cluster feature".into(),
            ),
            #[cfg(feature = "redis-sentinel")]
            Ok(Target::Sentinel(sentinel)) => Topology::Sentinel(sentinel),
            #[cfg(not(feature = "redis-sentinel"))]
            Ok(Target::Sentinel(_)) => Topology::Unusable(
                "the URL names Redis Sentinel: build with the redis-sentinel feature".into(),
            ),
            Err(why) => Topology::Unusable(why),
        })
    }

    #[cfg(feature = "redis-cluster")]
    pub(super) fn cluster(nodes: Vec<String>) -> Self {
        Self::new(Topology::Cluster(nodes))
    }

    pub(super) fn client(client: ::redis::Client) -> Self {
        Self::new(Topology::Client(Box::new(client)))
    }

    pub(super) fn manager(manager: ConnectionManager) -> Self {
        Self::new(Topology::Manager(manager))
    }

    #[cfg(feature = "redis-cluster")]
    pub(super) fn cluster_connection(
        connection: ::redis::cluster_async::ClusterConnection,
    ) -> Self {
        Self::new(Topology::ClusterConnection(connection))
    }

    /// The most decisions one call takes by default.
    pub const DEFAULT_MAX_BATCH: usize = 64;

    fn new(topology: Topology) -> Self {
        Self {
            topology,
            prefix: "rl:".to_owned(),
            key_format: KeyFormat::default(),
            timeout: RedisBackend::DEFAULT_TIMEOUT,
            cached_denials: 100_000,
            leased_by: None,
            max_batch: Self::DEFAULT_MAX_BATCH,
            #[cfg(feature = "redis-tls")]
            tls: super::tls::Tls::default(),
            on_health_change: None,
        }
    }

    /// Prefix every key with `prefix` (default `rl:`). It must not contain
    /// `{` or `}`, which would move keys between cluster slots.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How keys are written (default [`KeyFormat::Compact`]). Servers of
    /// two formats keep two budgets for each client: a rolling deploy that
    /// changes it lets a client through up to twice a limit while both
    /// serve ([`KeyFormat`]).
    pub fn key_format(mut self, format: KeyFormat) -> Self {
        self.key_format = format;
        self
    }

    /// How long a decision may take before it is a failure (default 50 ms);
    /// the layer then allows or denies as configured.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Remember up to about this many denials (default 100,000; 0: none),
    /// each until its retry-after: once Redis has denied a request until
    /// `T`, the same request (or a costlier one) from the same key is denied
    /// here until `T`, with no round trip. Exact: other requests can only
    /// count more, so Redis would deny it too. Denials of policies that
    /// count denied requests are never remembered (Redis must count each),
    /// nor peeks (cost 0). About 150 bytes a denial.
    pub fn cache_denials(mut self, max: usize) -> Self {
        self.cached_denials = max;
        self
    }

    /// Lease budgets (opt-in): this server takes a share of a key's budget
    /// in one call, `max(1, capacity / (30 × servers))` units of each limit,
    /// spends it locally, tops it up in the background below half a share,
    /// and gives back what it did not spend when the lease ends (after 1% of the window, between
    /// 10 ms and 1 s). Redis then sees one call per share instead of one per
    /// request.
    ///
    /// `servers` is how many servers share the limits. The units leased and
    /// not yet spent stay under 5% of each limit: the most that can be
    /// stranded while a client is refused. Fixed windows never admit beyond
    /// the limit (a lease ends with its window); under the other algorithms
    /// what is spent or given back after it was counted can shift by at most
    /// those units. Once a share no longer fits, requests are decided one by
    /// one, exactly. Policies with a penalty box, limits of requests in
    /// flight or counted denials are never leased. Quota headers of a leased
    /// admission show Redis's count when the lease was taken (its unspent
    /// units as used).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use tower_ratelimit::backend::RedisBackend;
    ///
    /// // Ten servers share the limits: each leases 1/300 of a limit.
    /// let redis = RedisBackend::builder("redis://127.0.0.1:6379")
    ///     .leased(10)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn leased(mut self, servers: u32) -> Self {
        self.leased_by = Some(servers);
        self
    }

    /// Send decisions in flight at the same moment to Redis together, at
    /// most `max` in one script call, and at most `max` Redis keys between
    /// them (default 64; 1 sends each alone, as it comes, in a call of its
    /// own). At most 256: a call blocks Redis while it runs, and 256 keys'
    /// states take it a few milliseconds (decisions of one sliding window,
    /// about 25 µs each; of eight limits and a penalty box, 14 keys, about
    /// 300 µs each).
    ///
    /// A decision that finds no call of its kind in flight is sent at
    /// once, so a quiet server adds no latency. While one is in flight,
    /// the decisions that arrive wait, and go on a second call beside it
    /// once as many wait as it carries, none on its keys (so two callers
    /// are each sent at once, as alone), or a quarter of `max`; else they
    /// wait for a call to end (or for a fifth of the
    /// [timeout](Self::timeout) since the last call was sent, for a far or
    /// slow Redis: a decision waits at most that long before it is sent),
    /// and the next call takes them all: one call of a script that decides
    /// each in turn, in the order they came, exactly as its own call would
    /// (all or nothing per request). Part of a call's Redis CPU is the
    /// call's, not the decision's, and a batch of new clients under one
    /// sliding window writes each state in the one command that reads it
    /// (Redis 7.0 and later): through the example server, at 32
    /// connections of new users, batching took Redis's CPU per decision to
    /// 0.57–0.63× (BENCHMARKS.md). "Of its kind": of the same script (the
    /// policy's shape), and on a cluster of the same slot, so one call's
    /// keys never cross slots.
    ///
    /// Each decision keeps its timeout, its circuit and the failure rule:
    /// one that waited past its timeout fails as a timeout (and is left out
    /// of the batch if it was not sent yet); a batch that fails fails each
    /// of its decisions; a decision whose own script failed fails alone.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use tower_ratelimit::backend::RedisBackend;
    ///
    /// // Every decision in a call of its own.
    /// let redis = RedisBackend::builder("redis://127.0.0.1:6379")
    ///     .max_batch(1)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn max_batch(mut self, max: usize) -> Self {
        self.max_batch = max;
        self
    }

    /// Be told when Redis starts failing, when the cause changes, and when
    /// it decides again: with the cause (a wrong password, a certificate
    /// that does not verify, a refused connection, …) so that a mistyped
    /// setting shows at once, with or without the `tracing` feature (which
    /// logs the same changes; the `metrics` feature counts each failure in
    /// `ratelimit_store_failures_total{backend, cause}`).
    /// [`RedisBackend::health`] reads the same state.
    ///
    /// ```no_run
    /// use tower_ratelimit::backend::{StoreHealth, RedisBackend};
    ///
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = RedisBackend::builder("redis://limiter:secret@127.0.0.1:6379")
    ///     .on_health_change(|health| match health {
    ///         StoreHealth::Failing { cause, error } => eprintln!("Redis failing ({cause}): {error}"),
    ///         other => eprintln!("Redis: {other:?}"),
    ///     })
    ///     .connect_lazy()?;
    /// # Ok(()) }
    /// ```
    pub fn on_health_change(
        mut self,
        report: impl Fn(&StoreHealth) + Send + Sync + 'static,
    ) -> Self {
        self.on_health_change = Some(OnChange(Arc::new(report)));
        self
    }

    /// Whether this builder names a Redis Cluster: such a backend must
    /// [`connect`](Self::connect) (it learns the slots first), where one
    /// server or Sentinel may [`connect_lazy`](Self::connect_lazy).
    pub fn is_cluster(&self) -> bool {
        match &self.topology {
            #[cfg(feature = "redis-cluster")]
            Topology::Cluster(_) | Topology::ClusterConnection(_) => true,
            _ => false,
        }
    }

    /// Connect now. Fails if the prefix is invalid or the server (or, for a
    /// cluster, its nodes) cannot be reached: a wrong address shows at once;
    /// under [`KeyFormat::Packed`], also if the server is older than Redis
    /// 7.0 (a backend of [`connect_lazy`](Self::connect_lazy) asks the same
    /// before its first call, and its calls fail with that error, cause
    /// `unknown_command`, until a server answers it).
    pub async fn connect(self) -> Result<RedisBackend, BackendError> {
        self.check_settings()?;
        let conn = match &self.topology {
            Topology::Standalone(_) | Topology::Client(_) => {
                let client = self.open()?;
                Connection::Standalone(
                    ConnectionManager::new_with_config(client, self.manager_config())
                        .await
                        .map_err(BackendError::from)?,
                )
            }
            Topology::Manager(manager) => Connection::Standalone(manager.clone()),
            #[cfg(feature = "redis-cluster")]
            Topology::ClusterConnection(connection) => Connection::Cluster(connection.clone()),
            #[cfg(feature = "redis-sentinel")]
            Topology::Sentinel(url) => Connection::Sentinel(
                super::sentinel::Sentinel::connect(
                    url.clone(),
                    self.opener(),
                    self.manager_config(),
                )
                .await?,
            ),
            Topology::Unusable(why) => return Err(BackendError::new(why.clone())),
            #[cfg(feature = "redis-cluster")]
            Topology::Cluster(nodes) => {
                let client = ::redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
                    .tcp_settings(super::connection::tcp_settings())
                    .response_timeout(self.timeout)
                    .connection_timeout(self.connection_timeout());
                #[cfg(feature = "redis-tls")]
                let client = match self.tls.certificates() {
                    Some(certificates) => client.certs(certificates),
                    None => client,
                };
                super::cluster::connect(client).await?
            }
        };
        let backend = self.finish(conn);
        #[cfg(feature = "redis-cluster")]
        if let Some(nodes) = &backend.nodes {
            nodes.learn_slots(&backend.link.conn).await;
        }
        backend.link.check_format().await?;
        Ok(backend)
    }

    /// A backend that connects on first use and whenever the connection is
    /// lost, so a service can start while Redis is down: until Redis answers,
    /// decisions fail fast and the layer allows, denies or falls back as
    /// configured. Standalone servers only (a cluster client must see the
    /// cluster to learn its slots: use [`connect`](Self::connect)). Call it
    /// inside a Tokio runtime.
    pub fn connect_lazy(self) -> Result<RedisBackend, BackendError> {
        self.check_settings()?;
        let conn = match &self.topology {
            Topology::Standalone(_) | Topology::Client(_) => Connection::Standalone(
                ConnectionManager::new_lazy_with_config(self.open()?, self.manager_config())
                    .map_err(BackendError::from)?,
            ),
            Topology::Manager(manager) => Connection::Standalone(manager.clone()),
            #[cfg(feature = "redis-cluster")]
            Topology::ClusterConnection(connection) => Connection::Cluster(connection.clone()),
            #[cfg(feature = "redis-sentinel")]
            Topology::Sentinel(url) => {
                Connection::Sentinel(super::sentinel::Sentinel::connect_lazy(
                    url.clone(),
                    self.opener(),
                    self.manager_config(),
                ))
            }
            Topology::Unusable(why) => return Err(BackendError::new(why.clone())),
            #[cfg(feature = "redis-cluster")]
            Topology::Cluster(_) => {
                return Err(BackendError::new(
                    "a cluster backend must connect(): it learns the cluster's slots first",
                ))
            }
        };
        Ok(self.finish(conn))
    }

    /// The usual production backend in one call, for one of `servers`
    /// servers sharing this Redis: connected lazily (so a server starts and
    /// serves while Redis is down), behind a [`Breaker`] with its defaults,
    /// falling back to this server's memory while Redis fails — where each
    /// server allows its part of every limit
    /// ([`MemoryBackendBuilder::servers`](crate::backend::MemoryBackendBuilder::servers)), so the fleet together stays
    /// within it. What it spells out:
    ///
    /// ```no_run
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use tower_ratelimit::backend::{Backend, MemoryBackend, RedisBackend};
    ///
    /// let usual = RedisBackend::builder("redis://127.0.0.1:6379").connect_with_fallback(3)?;
    /// let spelled_out = RedisBackend::builder("redis://127.0.0.1:6379")
    ///     .connect_lazy()?
    ///     .with_breaker()
    ///     .or_fallback(MemoryBackend::builder().servers(3).build());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A cluster must [`connect`](Self::connect) first (it learns the
    /// cluster's slots): compose it as spelled out above.
    pub fn connect_with_fallback(
        self,
        servers: u32,
    ) -> Result<Fallback<Breaker<RedisBackend>, MemoryBackend>, BackendError> {
        let local = MemoryBackend::builder().servers(servers).build();
        Ok(self.connect_lazy()?.with_breaker().or_fallback(local))
    }

    fn check_settings(&self) -> Result<(), BackendError> {
        if self.prefix.contains(['{', '}']) {
            return Err(BackendError::new(
                "the key prefix must not contain '{' or '}'",
            ));
        }
        if self.leased_by == Some(0) {
            return Err(BackendError::new(
                "leased(servers): the number of servers must be at least 1",
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.max_batch) {
            return Err(BackendError::new(format!(
                "max_batch({}): a call takes from 1 to {MAX_BATCH} decisions",
                self.max_batch
            )));
        }
        Ok(())
    }

    /// A connection may take longer to open than a decision to answer.
    pub(super) fn connection_timeout(&self) -> Duration {
        self.timeout.max(Duration::from_secs(1))
    }

    /// The client of a standalone URL (with the TLS settings), or the one
    /// the user gave.
    fn open(&self) -> Result<::redis::Client, BackendError> {
        let url = match &self.topology {
            Topology::Client(client) => return Ok(client.as_ref().clone()),
            Topology::Standalone(url) => url,
            _ => unreachable!("only standalone topologies open a client"),
        };
        (self.opener())(url)
            .map_err(|e| BackendError::new(format!("{}: {e}", super::url::redacted(url))))
    }

    /// How a URL is opened: with this builder's TLS settings.
    pub(super) fn opener(&self) -> Open {
        #[cfg(feature = "redis-tls")]
        let certificates = self.tls.certificates();
        Box::new(move |url: &str| {
            let info = connection_info(url)?;
            #[cfg(feature = "redis-tls")]
            if let Some(certificates) = &certificates {
                return ::redis::Client::build_with_tls(info, certificates.clone());
            }
            ::redis::Client::open(info)
        })
    }

    /// Where a fleet on this backend subscribes.
    #[cfg(feature = "config")]
    fn listen(&self) -> Listen {
        let open = self.opener();
        let servers = |urls: &[String]| {
            let opened = urls.iter().filter_map(|url| {
                let client = open(url).ok()?;
                Some((super::url::redacted(url), client))
            });
            Listen::Servers(opened.collect())
        };
        match &self.topology {
            Topology::Standalone(url) => servers(std::slice::from_ref(url)),
            Topology::Client(client) => {
                Listen::Servers(Arc::from([("client".to_owned(), client.as_ref().clone())]))
            }
            #[cfg(feature = "redis-cluster")]
            Topology::Cluster(nodes) => servers(nodes),
            #[cfg(feature = "redis-sentinel")]
            Topology::Sentinel(_) => Listen::Master,
            _ => Listen::Nowhere,
        }
    }

    /// One connection attempt per call, never a backoff of the manager's
    /// own: a refusal fails the decision at once (not after the timeout),
    /// and a Redis that answers again is used at the next call (a breaker
    /// paces the calls while it is down).
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.timeout))
            .set_connection_timeout(Some(self.connection_timeout()))
            .set_number_of_retries(0)
    }

    fn finish(self, conn: Connection) -> RedisBackend {
        #[cfg(feature = "config")]
        let listen = self.listen();
        #[cfg(feature = "redis-cluster")]
        let nodes = matches!(conn, Connection::Cluster(_))
            .then(|| super::cluster::Nodes::new(crate::backend::circuit::Settings::default()));
        let names = KeyNames {
            prefix: self.prefix.into(),
            format: self.key_format,
        };
        let health = HealthTracker::new("redis", self.on_health_change);
        RedisBackend {
            link: Link::new(conn, names, self.timeout, health),
            batches: (self.max_batch > 1)
                .then(|| Arc::new(Batches::new(self.max_batch, self.timeout / 5))),
            denials: Denials::new(self.cached_denials).map(Arc::new),
            leases: self.leased_by.map(|servers| Arc::new(Leases::new(servers))),
            #[cfg(feature = "redis-cluster")]
            nodes,
            #[cfg(feature = "config")]
            listen,
        }
    }
}
