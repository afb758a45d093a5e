//! The Redis backend: one limit across any number of servers.
//!
//! Every decision is one script call (EVALSHA; after a restart or failover
//! that lost the script, it is loaded again without the caller noticing),
//! checking and committing all of a policy's limits at once. Time is Redis's
//! own `TIME`, so application servers' clocks never change a decision, and
//! every number is an integer in microseconds: the script mirrors
//! [`algorithm`](crate::algorithm) exactly (a conformance suite holds them to
//! it). Each key expires when its state no longer matters.
//!
//! Keys are `{prefix}{<identity>}:<limit>:<algorithm>:<quota>`. The identity
//! is the [`Key`]'s bytes in hex (longer keys: a SHA-256 of them), so no byte
//! a client sends can reach the key's structure, and the braces make it a
//! hash tag: all of one identity's limits live in one Redis Cluster slot.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tower_ratelimit::backend::RedisBackend;
//! use tower_ratelimit::{Policy, RateLimitLayer};
//!
//! let redis = RedisBackend::builder("redis://127.0.0.1:6379")
//!     .prefix("myapp:rl:")
//!     .timeout(Duration::from_millis(50))
//!     .connect()
//!     .await?;
//! let layer = RateLimitLayer::new("100/min".parse::<Policy>()?).backend(redis);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{RedisError, Script, Value};
use sha2::{Digest, Sha256};

use super::{Backend, BackendError};
use crate::algorithm::{FixedRule, Form, Outcome};
use crate::{Decision, Key, Limit, Policy};

/// The script: each algorithm's file, then the driver.
const SCRIPT: &str = concat!(
    include_str!("lua/common.lua"),
    include_str!("lua/fixed_window.lua"),
    include_str!("lua/gcra.lua"),
    include_str!("lua/sliding_window.lua"),
    include_str!("lua/sliding_log.lua"),
    include_str!("lua/check.lua"),
);

/// Identities up to this many bytes appear in keys as hex; longer ones as
/// a hash, so keys stay short whatever a client sends.
const MAX_HEX_IDENTITY: usize = 64;

/// The default time a decision may take before it counts as a failure.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// Rate-limit state in Redis (standalone, Valkey, or Redis Cluster).
///
/// Cheap to clone; clones share one multiplexed connection, which
/// reconnects by itself.
#[derive(Clone)]
pub struct RedisBackend {
    conn: Connection,
    script: Arc<Script>,
    prefix: Arc<str>,
    timeout: Duration,
}

#[derive(Clone)]
enum Connection {
    Standalone(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(::redis::cluster_async::ClusterConnection),
}

/// Configures a [`RedisBackend`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisBackendBuilder {
    nodes: Vec<String>,
    cluster: bool,
    prefix: String,
    timeout: Duration,
}

impl RedisBackend {
    /// Connect to the Redis at `url` with the defaults.
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        Self::builder(url).connect().await
    }

    /// Configure a backend on the Redis at `url` (`redis://host:port/db`).
    pub fn builder(url: &str) -> RedisBackendBuilder {
        RedisBackendBuilder {
            nodes: vec![url.to_owned()],
            cluster: false,
            prefix: "rl:".to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Configure a backend on the Redis Cluster these nodes belong to.
    #[cfg(feature = "redis-cluster")]
    pub fn cluster_builder(
        nodes: impl IntoIterator<Item = impl Into<String>>,
    ) -> RedisBackendBuilder {
        RedisBackendBuilder {
            nodes: nodes.into_iter().map(Into::into).collect(),
            cluster: true,
            prefix: "rl:".to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Decide as [`Backend::check`] does, at `now_us` (microseconds since the
    /// Unix epoch) instead of Redis's clock. For tests that replay a trace;
    /// production decisions use the server's `TIME`.
    pub async fn check_at(
        &self,
        key: &Key,
        policy: &Policy,
        cost: u32,
        now_us: u64,
    ) -> Result<Decision, BackendError> {
        self.decide(key, policy, cost, Some(now_us)).await
    }

    /// The Redis keys a `key` under `limit` occupies (one, or two for a sliding log).
    pub fn redis_keys(&self, key: &Key, limit: &Limit) -> Vec<String> {
        let mut keys = Vec::with_capacity(2);
        self.push_keys(&mut keys, &identity(key), limit);
        keys
    }

    /// Append the keys of `identity` under `limit`.
    fn push_keys(&self, keys: &mut Vec<String>, identity: &str, limit: &Limit) {
        let base = self.base_key(identity, limit);
        if let Form::Log(_) = limit.rule().form() {
            keys.push(format!("{base}:log"));
            keys.push(format!("{base}:sum"));
        } else {
            keys.push(base);
        }
    }

    fn base_key(&self, identity: &str, limit: &Limit) -> String {
        [&*self.prefix, "{", identity, "}:", limit.identity()].concat()
    }

    /// The script's keys and arguments for one decision.
    fn invocation_parts(
        &self,
        key: &Key,
        policy: &Policy,
        cost: u32,
        now_us: Option<u64>,
    ) -> (Vec<String>, Vec<String>) {
        let mut keys = Vec::with_capacity(policy.limits().len() + 1);
        let mut args = vec![
            now_us.map_or_else(String::new, |n| n.to_string()),
            cost.to_string(),
            u8::from(policy.counts_denied()).to_string(),
        ];
        let identity = identity(key);
        for limit in policy.limits() {
            // The algorithm codes of check.lua.
            let (code, interval) = match limit.rule().form() {
                Form::Fixed(FixedRule::FixedWindow(_)) => (1, 0),
                Form::Log(_) => (2, 0),
                Form::Fixed(FixedRule::SlidingWindow(_)) => (3, 0),
                Form::Fixed(FixedRule::Gcra(gcra)) => (4, gcra.interval_us()),
            };
            self.push_keys(&mut keys, &identity, limit);
            args.push(code.to_string());
            args.push(limit.capacity().to_string());
            args.push((limit.quota().window().as_micros() as u64).to_string());
            args.push(interval.to_string());
        }
        (keys, args)
    }

    /// The `EVALSHA` command one decision sends, word by word: for
    /// benchmarking the script with other tools (`redis-benchmark`).
    #[doc(hidden)]
    pub fn evalsha_command(&self, key: &Key, policy: &Policy, cost: u32) -> Vec<String> {
        let (keys, args) = self.invocation_parts(key, policy, cost, None);
        let mut command = vec![
            "EVALSHA".to_owned(),
            self.script.get_hash().to_owned(),
            keys.len().to_string(),
        ];
        command.extend(keys);
        command.extend(args);
        command
    }

    async fn decide(
        &self,
        key: &Key,
        policy: &Policy,
        cost: u32,
        now_us: Option<u64>,
    ) -> Result<Decision, BackendError> {
        let (keys, args) = self.invocation_parts(key, policy, cost, now_us);
        let mut invocation = self.script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(a);
        }
        let call = async {
            match &self.conn {
                Connection::Standalone(conn) => {
                    invocation.invoke_async::<Value>(&mut conn.clone()).await
                }
                #[cfg(feature = "redis-cluster")]
                Connection::Cluster(conn) => {
                    invocation.invoke_async::<Value>(&mut conn.clone()).await
                }
            }
        };
        let reply = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| {
                BackendError::new(format!("no answer from Redis within {:?}", self.timeout))
            })?
            .map_err(BackendError::new)?;
        decision_from(policy, &reply)
    }
}

/// The identity part of a Redis key: hex of the key's bytes, or a hash.
fn identity(key: &Key) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hex = |bytes: &[u8], out: &mut String| {
        for &b in bytes {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    };
    let bytes = key.as_bytes();
    let mut out = String::with_capacity(2 * MAX_HEX_IDENTITY + 1);
    if bytes.len() <= MAX_HEX_IDENTITY {
        hex(bytes, &mut out);
    } else {
        // "h" cannot begin a hex encoding, so the two forms never meet.
        out.push('h');
        hex(&Sha256::digest(bytes)[..16], &mut out);
    }
    out
}

/// The decision from the script's reply: per limit, retry, remaining, reset.
fn decision_from(policy: &Policy, reply: &Value) -> Result<Decision, BackendError> {
    let Value::Array(items) = reply else {
        return Err(BackendError::new(format!(
            "unexpected reply from the script: {reply:?}"
        )));
    };
    let number = |v: &Value| match v {
        Value::Int(n) => Ok(*n),
        other => Err(BackendError::new(format!(
            "unexpected value from the script: {other:?}"
        ))),
    };
    if items.len() != 3 * policy.limits().len() {
        return Err(BackendError::new(
            "the script answered for a different number of limits",
        ));
    }
    let mut decision = Decision::empty();
    for (limit, item) in policy.limits().iter().zip(items.chunks_exact(3)) {
        let (retry, remaining, reset) = (number(&item[0])?, number(&item[1])?, number(&item[2])?);
        let (remaining, reset) = (remaining.max(0) as u64, reset.max(0) as u64);
        let capacity = limit.capacity();
        decision.push(match retry {
            0 => Outcome::allowed(capacity, remaining, reset),
            r if r < 0 => Outcome::never(capacity, remaining, reset),
            r => Outcome::denied(r as u64, capacity, remaining, reset),
        });
    }
    decision.decide();
    Ok(decision)
}

impl RedisBackendBuilder {
    /// Prefix every key with `prefix` (default `rl:`). It must not contain
    /// `{` or `}`, which would move keys between cluster slots.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a decision may take before it is a failure (default 100 ms);
    /// the layer then allows or denies as configured.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connect now. Fails if the prefix is invalid or the server (or, for a
    /// cluster, its nodes) cannot be reached: a wrong address shows at once.
    pub async fn connect(self) -> Result<RedisBackend, BackendError> {
        self.check_prefix()?;
        let conn = if self.cluster {
            #[cfg(feature = "redis-cluster")]
            {
                let client = ::redis::cluster::ClusterClientBuilder::new(self.nodes.clone())
                    .response_timeout(self.timeout)
                    .connection_timeout(self.timeout.max(Duration::from_secs(1)))
                    .build()
                    .map_err(BackendError::new)?;
                Connection::Cluster(
                    client
                        .get_async_connection()
                        .await
                        .map_err(BackendError::new)?,
                )
            }
            #[cfg(not(feature = "redis-cluster"))]
            unreachable!("cluster builders exist only with the redis-cluster feature")
        } else {
            let (client, config) = self.standalone()?;
            Connection::Standalone(
                ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(BackendError::new)?,
            )
        };
        Ok(self.finish(conn))
    }

    /// A backend that connects on first use and whenever the connection is
    /// lost, so a service can start while Redis is down: until Redis answers,
    /// decisions fail fast and the layer allows, denies or falls back as
    /// configured. Standalone servers only (a cluster client must see the
    /// cluster to learn its slots: use [`connect`](Self::connect)). Call it
    /// inside a Tokio runtime.
    pub fn build(self) -> Result<RedisBackend, BackendError> {
        self.check_prefix()?;
        if self.cluster {
            return Err(BackendError::new(
                "a cluster backend must connect(): it learns the cluster's slots first",
            ));
        }
        let (client, config) = self.standalone()?;
        let conn =
            ConnectionManager::new_lazy_with_config(client, config).map_err(BackendError::new)?;
        Ok(self.finish(Connection::Standalone(conn)))
    }

    fn check_prefix(&self) -> Result<(), BackendError> {
        if self.prefix.contains(['{', '}']) {
            return Err(BackendError::new(
                "the key prefix must not contain '{' or '}'",
            ));
        }
        Ok(())
    }

    fn standalone(
        &self,
    ) -> Result<(::redis::Client, ::redis::aio::ConnectionManagerConfig), BackendError> {
        let url = self
            .nodes
            .first()
            .ok_or_else(|| BackendError::new("no Redis URL"))?;
        let client = ::redis::Client::open(url.as_str()).map_err(BackendError::new)?;
        let config = ::redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.timeout))
            .set_connection_timeout(Some(self.timeout.max(Duration::from_secs(1))));
        Ok((client, config))
    }

    fn finish(self, conn: Connection) -> RedisBackend {
        RedisBackend {
            conn,
            script: Arc::new(Script::new(SCRIPT)),
            prefix: self.prefix.into(),
            timeout: self.timeout,
        }
    }
}

impl Backend for RedisBackend {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, BackendError>> + Send>>;

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        let (this, key, policy) = (self.clone(), key.clone(), policy.clone());
        Box::pin(async move { this.decide(&key, &policy, cost, None).await })
    }
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.conn {
            Connection::Standalone(_) => "standalone",
            #[cfg(feature = "redis-cluster")]
            Connection::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisBackend")
            .field("kind", &kind)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl From<RedisError> for BackendError {
    fn from(e: RedisError) -> Self {
        BackendError::new(e)
    }
}
