//! Redis Sentinel (feature `redis-sentinel`): the connection follows the
//! master through failovers.
//!
//! The sentinels are asked which server is the master (and the answer is
//! checked with `ROLE`; during a failover, the replica the sentinels chose
//! is used as soon as it says it is the master, before the sentinels have
//! seen that themselves); decisions go to it over one connection. When a call
//! fails — the master died, froze, or came back as a replica (`READONLY`) —
//! a task of its own asks the sentinels again every 100 ms (for at most
//! 30 s, and only until a call succeeds) and moves the connection to the
//! master they name once it is another server. Requests never wait for
//! this: while no master answers they fail, and the failure rule decides.
//! Scripts are loaded on the new master by the first call that finds them
//! missing, unseen by the request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, ErrorKind, RedisError, Value};
use arc_swap::ArcSwapOption;

use super::connection::Open;
use super::url::SentinelUrl;
use crate::backend::BackendError;

/// How often the sentinels are asked while the master is being followed.
const ASK_EVERY: Duration = Duration::from_millis(100);
/// How long one failure keeps the sentinels being asked.
const FOLLOW_FOR: Duration = Duration::from_secs(30);
/// How long one sentinel, or the master it names, may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

pub(super) struct Sentinel {
    target: SentinelUrl,
    open: Open,
    master: ArcSwapOption<Master>,
    config: ConnectionManagerConfig,
    following: AtomicBool,
    /// When a call last succeeded, in ms since `epoch` (0: never).
    succeeded_at: AtomicU64,
    epoch: Instant,
}

/// The master as the sentinels last named it, and the connection to it.
struct Master {
    addr: String,
    conn: ConnectionManager,
    /// For the fleet's subscription.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    client: Client,
}

impl Sentinel {
    /// Ask the sentinels for the master now and connect to it.
    pub(super) async fn connect(
        target: SentinelUrl,
        open: Open,
        config: ConnectionManagerConfig,
    ) -> Result<Arc<Self>, BackendError> {
        let this = Self::new(target, open, config);
        let (addr, client) = this.ask().await.map_err(|e| {
            BackendError::new(format!(
                "the sentinels named no master {:?} that answers: {e}",
                this.target.master
            ))
        })?;
        let conn = ConnectionManager::new_with_config(client.clone(), this.config.clone())
            .await
            .map_err(BackendError::from)?;
        this.master
            .store(Some(Arc::new(Master { addr, conn, client })));
        Ok(this)
    }

    /// Ask the sentinels on first use: until they name a master that
    /// answers, calls fail at once. Call it inside a Tokio runtime.
    pub(super) fn connect_lazy(
        target: SentinelUrl,
        open: Open,
        config: ConnectionManagerConfig,
    ) -> Arc<Self> {
        let this = Self::new(target, open, config);
        this.failed();
        this
    }

    fn new(target: SentinelUrl, open: Open, config: ConnectionManagerConfig) -> Arc<Self> {
        Arc::new(Self {
            target,
            open,
            master: ArcSwapOption::empty(),
            config,
            following: AtomicBool::new(false),
            succeeded_at: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// The connection to the master, if one is known.
    pub(super) fn current(&self) -> Result<ConnectionManager, RedisError> {
        match &*self.master.load() {
            Some(master) => Ok(master.conn.clone()),
            None => Err(RedisError::from((
                ErrorKind::Io,
                "no master known yet: asking the sentinels",
            ))),
        }
    }

    /// The master's address and a client for it, if one is known.
    #[cfg(feature = "config")]
    pub(super) fn master_client(&self) -> Option<(String, Client)> {
        let master = self.master.load_full()?;
        Some((master.addr.clone(), master.client.clone()))
    }

    /// A call succeeded: the master is where we thought.
    pub(super) fn succeeded(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.succeeded_at.store(now.max(1), Ordering::Relaxed);
    }

    /// A call failed: follow the master, unless that is already under way.
    pub(super) fn failed(self: &Arc<Self>) {
        if self.following.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.following.store(false, Ordering::Release);
            return;
        };
        let this = Arc::clone(self);
        runtime.spawn(async move {
            this.follow().await;
            this.following.store(false, Ordering::Release);
        });
    }

    /// Ask the sentinels until they name another master (then connect to
    /// it), a call succeeds, or [`FOLLOW_FOR`] has passed.
    async fn follow(&self) {
        let started = self.epoch.elapsed().as_millis() as u64;
        let deadline = Instant::now() + FOLLOW_FOR;
        while Instant::now() < deadline {
            if self.succeeded_at.load(Ordering::Relaxed) > started {
                return;
            }
            if let Ok((addr, client)) = self.ask().await {
                let known = self.master.load().as_ref().map(|m| m.addr.clone());
                if known.as_deref() != Some(addr.as_str()) {
                    if let Ok(conn) =
                        ConnectionManager::new_lazy_with_config(client.clone(), self.config.clone())
                    {
                        self.master
                            .store(Some(Arc::new(Master { addr, conn, client })));
                        return;
                    }
                }
            }
            tokio::time::sleep(ASK_EVERY).await;
        }
    }

    /// The master the first sentinel that answers names, once that server
    /// says it is a master (`ROLE`), and a client for it.
    async fn ask(&self) -> Result<(String, Client), RedisError> {
        let mut last = None;
        for (host, port) in &self.target.sentinels {
            match self.ask_one(host, *port).await {
                Ok(master) => return Ok(master),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| (ErrorKind::Io, "no sentinel is named").into()))
    }

    async fn ask_one(&self, host: &str, port: u16) -> Result<(String, Client), RedisError> {
        let sentinel = (self.open)(&self.target.url_of(host, port, false))?;
        let mut sentinel = within(sentinel.get_multiplexed_async_connection()).await?;
        let named: Option<(String, u16)> = within(
            ::redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.target.master)
                .query_async(&mut sentinel),
        )
        .await?;
        let (host, port) = named.ok_or_else(|| {
            RedisError::from((ErrorKind::Io, "the sentinel knows no master by that name"))
        })?;
        match self.master_at(&host, port).await {
            Ok(client) => Ok((format!("{host}:{port}"), client)),
            Err(e) => {
                // A sentinel names the promoted replica only once it has
                // seen the promotion, up to a second later; the replica it
                // chose is flagged `promoted` before that, and says itself
                // when it is the master.
                let Some((host, port)) = self.promoted(&mut sentinel).await else {
                    return Err(e);
                };
                let client = self.master_at(&host, port).await?;
                Ok((format!("{host}:{port}"), client))
            }
        }
    }

    /// A client for the server at `host:port`, if it says it is a master.
    async fn master_at(&self, host: &str, port: u16) -> Result<Client, RedisError> {
        let client = (self.open)(&self.target.url_of(host, port, true))?;
        let mut master = within(client.get_multiplexed_async_connection()).await?;
        let role: Vec<Value> = within(::redis::cmd("ROLE").query_async(&mut master)).await?;
        match role.first() {
            Some(Value::BulkString(role)) if role == b"master" => Ok(client),
            _ => Err((ErrorKind::Io, "the server named is not a master (yet)").into()),
        }
    }

    /// The replica a failover under way has chosen, as a sentinel lists it.
    async fn promoted(
        &self,
        sentinel: &mut ::redis::aio::MultiplexedConnection,
    ) -> Option<(String, u16)> {
        let replicas: Vec<Vec<String>> = within(
            ::redis::cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(&self.target.master)
                .query_async(sentinel),
        )
        .await
        .ok()?;
        replicas.iter().find_map(|fields| {
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .and_then(|pair| pair.get(1))
            };
            let promoted = field("flags")?.split(',').any(|f| f == "promoted");
            promoted.then(|| Some((field("ip")?.clone(), field("port")?.parse().ok()?)))?
        })
    }
}

/// `future`, or an error after [`ANSWER_WITHIN`].
async fn within<T>(
    future: impl std::future::Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisError> {
    tokio::time::timeout(ANSWER_WITHIN, future)
        .await
        .map_err(|_| RedisError::from((ErrorKind::Io, "no answer within 1 s")))?
}
