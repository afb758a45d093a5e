//! The Redis backend: one limit across any number of servers.

mod batch;
mod builder;
#[cfg(feature = "redis-cluster")]
mod cluster;
mod connection;
mod control;
#[cfg(feature = "test-hooks")]
mod hooks;
mod leases;
mod link;
mod repair;
mod script;
#[cfg(feature = "redis-sentinel")]
mod sentinel;
#[cfg(feature = "redis-tls")]
mod tls;
mod url;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use self::batch::{Batches, Call, Lane};
use self::leases::Leases;
use self::link::Link;
#[cfg(feature = "fair-share")]
pub(crate) use self::script::capacity::{Capacities, FlightPermit};
pub use self::script::KeyFormat;
use self::script::{decision_from, invocation, limit_keys, Ask, Shape};
use super::denials::Denials;
use super::{Backend, BackendError, Cause, Peeks, Reset, StoreHealth};
use crate::key::Key;
use crate::{clock::Micros, Decision, Limit, Policy};

pub use self::builder::RedisBackendBuilder;

/// Rate-limit state in Redis (standalone, Valkey, or Redis Cluster): one
/// limit across any number of servers.
///
/// Every decision is made by one script call (EVALSHA; after a restart or
/// failover that lost the script, it is loaded again without the caller
/// noticing), checking and committing all of a policy's limits at once;
/// decisions in flight at the same moment share a call
/// ([`max_batch`](RedisBackendBuilder::max_batch)), each decided as alone. Time is Redis's
/// own `TIME`, so application servers' clocks never change a decision, and
/// every number is an integer in microseconds: the script mirrors
/// [`algorithm`](crate::algorithm) exactly (a conformance suite holds them to
/// it). Each key expires when its state no longer matters.
///
/// Keys are `{prefix}3{<client>}<limit>` (`5{` for a window's state,
/// [`KeyFormat::Compact`]): a
/// 90-bit hash of the [`Key`]'s bytes and a 54-bit hash of the limit's
/// [identity](Limit::identity), so no byte a client sends can reach the
/// key's structure, and the braces make it a hash tag: all of one client's
/// limits live in one Redis Cluster slot. [`KeyFormat::Packed`] keeps many
/// clients' states as fields of one hash.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tower_ratelimit::backend::RedisBackend;
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// let redis = RedisBackend::builder("redis://127.0.0.1:6379")
///     .prefix("myapp:rl:")
///     .timeout(Duration::from_millis(50))
///     .connect()
///     .await?;
/// let layer = RateLimitLayer::new("100/min".parse::<Policy>()?).backend(redis);
/// # Ok(()) }
/// ```
///
/// Cheap to clone; clones share one multiplexed connection, which
/// reconnects by itself.
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub struct RedisBackend {
    link: Link,
    /// Decisions in flight at once, sent together (`None`: each alone).
    batches: Option<Arc<Batches>>,
    denials: Option<Arc<Denials>>,
    leases: Option<Arc<Leases>>,
    /// On a cluster: a circuit per node.
    #[cfg(feature = "redis-cluster")]
    nodes: Option<Arc<cluster::Nodes>>,
    /// Where a fleet on this backend subscribes.
    #[cfg(feature = "config")]
    listen: control::Listen,
}

impl RedisBackend {
    /// The default time a decision may take before it counts as a failure.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

    /// Connect to the Redis at `url` with the defaults.
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        Self::builder(url).connect().await
    }

    /// Whether Redis is deciding now, and if not, why
    /// ([`RedisBackendBuilder::on_health_change`] is told of each change).
    pub fn health(&self) -> StoreHealth {
        self.link.health.health()
    }

    /// Denials remembered now (see
    /// [`cache_denials`](RedisBackendBuilder::cache_denials)).
    pub fn cached_denials(&self) -> usize {
        self.denials.as_ref().map_or(0, |d| d.len())
    }

    /// Units counted in Redis but not yet spent by this server's leases
    /// (see [`leased`](RedisBackendBuilder::leased); 0 without leases).
    pub fn leased_units(&self) -> u64 {
        self.leases.as_ref().map_or(0, |l| l.held())
    }

    /// The shared capacities (`layer::fair_share`) on this backend's
    /// connection.
    #[cfg(feature = "fair-share")]
    pub(crate) fn capacities(&self) -> Capacities<'_> {
        Capacities(&self.link)
    }

    /// The Redis keys a `key` under `limit` occupies (one, or two for a
    /// sliding log). Under [`KeyFormat::Packed`] a fixed-size limit's key
    /// is a hash shared with other clients, and the state is the field
    /// [`redis_field`](Self::redis_field) of it.
    pub fn redis_keys(&self, key: &Key, limit: &Limit) -> Vec<String> {
        let mut keys = Vec::with_capacity(2);
        limit_keys(&self.link.names, key, limit, |k| {
            keys.push(String::from_utf8_lossy(k).into_owned());
        });
        keys
    }

    /// The field `key`'s states take in packed hashes, under
    /// [`KeyFormat::Packed`] (`None` under the other formats).
    pub fn redis_field(&self, key: &Key) -> Option<String> {
        script::packed_field(&self.link.names, key)
            .map(|f| String::from_utf8_lossy(&f).into_owned())
    }

    /// `ask` (a settlement or a permit) as a boxed future, forgetting any
    /// denial remembered for the key: what is given back makes room.
    fn ask(
        &self,
        key: &Key,
        policy: &Policy,
        ask: Ask,
    ) -> Pin<Box<dyn Future<Output = Result<Decision, BackendError>> + Send>> {
        let (this, key, policy) = (self.clone(), key.clone(), policy.clone());
        Box::pin(async move {
            if let Some(denials) = &this.denials {
                denials.forget(&key, &policy);
            }
            this.decide(&key, &policy, ask, None).await
        })
    }

    async fn decide(
        &self,
        key: &Key,
        policy: &Policy,
        ask: Ask,
        now: Option<Micros>,
    ) -> Result<Decision, BackendError> {
        let (decision, permit) = self.call(key, policy, ask, now).await?;
        Ok(match permit {
            0 => decision,
            at => decision.with_permit(Micros::new(at)),
        })
    }

    /// The lane of a decision of `shape` on `key`: on a cluster, one per
    /// slot.
    fn lane(&self, shape: Shape, key: &Key) -> Lane {
        #[cfg(feature = "redis-cluster")]
        if self.nodes.is_some() {
            let slot = script::key_slot(&self.link.names, key);
            return Lane { shape, slot };
        }
        let _ = key;
        Lane { shape, slot: 0 }
    }

    /// One script call, through the circuit of the cluster node that holds
    /// the key (see `cluster.rs`): while it is open the call fails at once,
    /// and one probe at a time (a check of cost 0, on a task of its own)
    /// asks the node again.
    async fn call(
        &self,
        key: &Key,
        policy: &Policy,
        ask: Ask,
        now: Option<Micros>,
    ) -> Result<(Decision, u64), BackendError> {
        #[cfg(feature = "redis-cluster")]
        if let Some(nodes) = &self.nodes {
            return nodes.call_through(self, key, policy, ask, now).await;
        }
        self.call_now(key, policy, ask, now).await
    }

    /// One script call (or a part of one, batched): the decision and the
    /// reply's last number.
    async fn call_now(
        &self,
        key: &Key,
        policy: &Policy,
        ask: Ask,
        now: Option<Micros>,
    ) -> Result<(Decision, u64), BackendError> {
        self.link.check_format().await?;
        // Numbers written as numbers: no string per argument.
        let shape = Shape::of(policy, ask, self.link.names.format);
        let mut call = Call::default();
        invocation(&self.link.names, key, policy, (ask, shape), now, &mut call);
        let reply = match &self.batches {
            Some(batches) => batches.send(&self.link, self.lane(shape, key), call).await,
            None => self.link.send_alone(shape, &call).await,
        };
        let reply = match reply {
            Err(error) if error.is_about_one_key() => {
                Err(self.link.repaired(key, policy, error).await)
            }
            reply => reply,
        };
        decision_from(policy, &reply?)
    }
}

impl Backend for RedisBackend {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, BackendError>> + Send>>;

    fn name(&self) -> &'static str {
        "redis"
    }

    // One check, by the first stage that can answer it: a denial
    // remembered here (`denials`), this server's lease (`leases.rs`), or
    // one script call (`call`): through the circuit of the cluster node
    // holding the key (`cluster.rs`), in a batch with its lane's decisions
    // in flight (`batch/`), on the `Link` (`link.rs`), its keys checked
    // when it failed as one key's trouble would (`repair.rs`).
    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        if let Some(denied) = self.denials.as_ref().and_then(|d| d.get(key, policy, cost)) {
            return Box::pin(std::future::ready(Ok(denied)));
        }
        let spend = match &self.leases {
            Some(leases) => match leases.spend_or_answer(self, key, policy, cost) {
                Ok(spend) => Some((Arc::clone(leases), spend)),
                Err(answered) => return answered,
            },
            None => None,
        };
        let (this, key, policy) = (self.clone(), key.clone(), policy.clone());
        Box::pin(async move {
            let decision = match spend {
                Some((leases, spend)) => {
                    leases
                        .after_spend(&this, spend, &key, &policy, cost)
                        .await?
                }
                None => this.decide(&key, &policy, Ask::Check(cost), None).await?,
            };
            if let Some(denials) = &this.denials {
                denials.remember(&key, &policy, cost, &decision);
            }
            Ok(decision)
        })
    }

    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        self.ask(key, policy, Ask::Release { permit, cost })
    }

    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        self.ask(key, policy, Ask::Renew { permit, cost })
    }

    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        self.ask(key, policy, Ask::Settle { reserved, actual })
    }

    /// One `DEL` of every Redis key of `key` under `policy` and, under the
    /// packed format, one `HDEL` of the client's field in each shared hash,
    /// in one pipeline (one slot: a cluster takes it to one node).
    /// Remembered denials and leases of the key are dropped with it.
    fn reset(&self, key: &Key, policy: &Policy) -> Reset {
        let (this, key, policy) = (self.clone(), key.clone(), policy.clone());
        Box::pin(async move {
            this.forget_local(&key, &policy);
            let (mut pipe, mut own, mut owned) = (::redis::pipe(), ::redis::cmd("DEL"), false);
            script::policy_keys(&this.link.names, &key, &policy, |k, field| match field {
                None => {
                    own.arg(k);
                    owned = true;
                }
                Some(field) => {
                    pipe.cmd("HDEL").arg(k).arg(field).ignore();
                }
            });
            // A packed policy of fixed-size limits alone has no key of its own.
            if owned {
                pipe.add_command(own).ignore();
            }
            this.link
                .answered(this.link.conn.query_pipeline(&pipe))
                .await
        })
    }

    /// Remembered denials and leases of the key.
    fn forget_local(&self, key: &Key, policy: &Policy) {
        if let Some(denials) = &self.denials {
            denials.forget(key, policy);
        }
        if let Some(leases) = &self.leases {
            leases.forget(key, policy);
        }
    }

    /// One pipeline, one round trip, on a standalone server; on a cluster,
    /// whose keys live on several nodes, one call per key.
    fn peek_many(&self, asks: Vec<(Key, Policy)>) -> Peeks {
        let this = self.clone();
        Box::pin(async move {
            let Some(conn) = this.link.conn.one_server().map_err(BackendError::from)? else {
                let mut decisions = Vec::with_capacity(asks.len());
                for (key, policy) in &asks {
                    decisions.push(this.decide(key, policy, Ask::Check(0), None).await?);
                }
                return Ok(decisions);
            };
            let ask = Ask::Check(0);
            let mut pipe = ::redis::pipe();
            for (key, policy) in &asks {
                let shape = Shape::of(policy, ask, this.link.names.format);
                let mut cmd = ::redis::Cmd::with_capacity(16, 256);
                cmd.arg("EVALSHA").arg(this.link.script(shape).get_hash());
                invocation(&this.link.names, key, policy, (ask, shape), None, &mut cmd);
                pipe.add_command(cmd);
            }
            let call = async {
                match pipe.query_async::<Vec<Value>>(&mut conn.clone()).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        let mut shapes: Vec<Shape> = asks
                            .iter()
                            .map(|(_, p)| Shape::of(p, ask, this.link.names.format))
                            .collect();
                        shapes.sort_by_key(|shape| shape.index());
                        shapes.dedup_by_key(|shape| shape.index());
                        for shape in shapes {
                            this.link.conn.load(this.link.script(shape)).await?;
                        }
                        pipe.query_async(&mut conn.clone()).await
                    }
                    replies => replies,
                }
            };
            let replies: Vec<Value> = this.link.answered(call).await?;
            if replies.len() != asks.len() {
                return Err(BackendError::new(format!(
                    "Redis answered {} of {} reads",
                    replies.len(),
                    asks.len()
                )));
            }
            asks.iter()
                .zip(&replies)
                .map(|((_, policy), reply)| Ok(decision_from(policy, reply)?.0))
                .collect()
        })
    }
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("kind", &self.link.conn.kind())
            .field("prefix", &self.link.names.prefix)
            .field("key_format", &self.link.names.format)
            .field("timeout", &self.link.timeout)
            .field("cached_denials", &self.denials.as_ref().map(|d| d.len()))
            .finish()
    }
}

impl From<RedisError> for BackendError {
    fn from(e: RedisError) -> Self {
        let cause = cause_of(&e);
        BackendError::new(e).with_cause(cause)
    }
}

/// What a script's error (its text, in lower case) says of its cause, if
/// it says: one key's trouble, to be checked on the keys (`repair.rs`), or
/// a full Redis. Alone, or one decision's within a batch's reply.
fn cause_in_script(text: &str) -> Option<Cause> {
    let has = |word: &str| text.contains(word);
    // A key of another type, or values a script cannot compute with
    // (Lua's own runtime errors, whose text names the script). Redis's
    // own refusals inside a script (OOM, READONLY, BUSY) name no Lua
    // operation.
    if has("wrongtype") || (has("user_script") && has("attempt to")) {
        return Some(Cause::KeyState);
    }
    // "OOM command not allowed when used memory > 'maxmemory'", alone or
    // inside a script's error.
    if has("used memory > 'maxmemory'") {
        return Some(Cause::OutOfMemory);
    }
    None
}

/// What a Redis error says about why no decision could be had.
fn cause_of(e: &RedisError) -> Cause {
    use ::redis::ErrorKind as Kind;
    if e.is_connection_refusal() {
        return Cause::Refused;
    }
    if e.is_timeout() {
        return Cause::Timeout;
    }
    match e.kind() {
        Kind::AuthenticationFailed => return Cause::Authentication,
        Kind::Server(ServerErrorKind::NoPerm) => return Cause::Permission,
        _ => {}
    }
    // The rest is told only by the text (the crate keeps no kind for them).
    let text = e.to_string().to_ascii_lowercase();
    let has = |word: &str| text.contains(word);
    if let Some(cause) = cause_in_script(&text) {
        return cause;
    }
    if has("wrongpass") || has("noauth") || has("invalid username-password") {
        Cause::Authentication
    } else if has("unknown command") {
        Cause::UnknownCommand
    } else if has("certificate") || has("tls") || has("handshake") {
        Cause::Tls
    } else if has("lookup") || has("name or service not known") || has("no address") {
        Cause::UnknownHost
    } else {
        Cause::Other
    }
}
