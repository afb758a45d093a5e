//! [`Fleet`]: one limits file for every server on a Redis, changed from any
//! of them.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures_core::Stream;
use redis::Value;
use sha2::{Digest, Sha256};

use super::watch::{log_refused, told, watch_file};
use super::{ConfigError, Limits, LimitsFile, Reload};
use crate::backend::{RedisBackend, RedisBackendBuilder};
use crate::key::Key;

/// What a server is told to run when another server [`Fleet::forget`]s a key.
type OnForget = Arc<dyn Fn(&Key) + Send + Sync>;

/// The start of a message that carries a forgotten key (hex) rather than a
/// version's number.
const FORGET: &str = "forget ";

/// How often a server asks Redis for the version even without a message:
/// a message missed while its subscription was down costs at most this.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// How many times a change is tried again when another server's change
/// landed between reading the version and writing the next.
const MAX_TRIES: usize = 20;

/// How long a joining server waits for the fleet's copy, when Redis has
/// none, before it writes its own as the first version: long enough for
/// the servers already running (who look every [`POLL_EVERY`]) to put back
/// a copy Redis lost, so a late joiner never replaces their newer version
/// with its own file.
const LOST_COPY_WAIT: Duration = Duration::from_millis(1_000);

/// How long one of the fleet's commands may take: a second beyond the
/// longest a `WAIT` is asked to wait ([`CONFIRM_WITHIN`]), so that a busy
/// Redis answering a replica's silence is not taken for a dead one.
const ANSWER_WITHIN: Duration = Duration::from_millis(1_500);

/// How long a change waits for the primary's replicas to confirm it.
const CONFIRM_WITHIN: Duration = Duration::from_millis(500);

/// Puts back version `ARGV[1]` (text `ARGV[2]`, sum `ARGV[3]`) if the
/// stored one is older or gone (Redis restarted empty, flushed, evicted
/// the hash, or failed over to a replica that had not seen it), and tells
/// every server; 1 if it did.
const RESEED: &str = r"
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
if seq >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'text', ARGV[2], 'sum', ARGV[3])
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
";

/// Writes a new version (text `ARGV[2]`, sum `ARGV[3]`) if the stored one
/// is still `ARGV[1]`, and tells every server: `{1, new}`, or `{0, stored}`
/// when another change won.
const CHANGE: &str = r"
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
if seq ~= tonumber(ARGV[1]) then return {0, seq} end
redis.call('HSET', KEYS[1], 'seq', seq + 1, 'text', ARGV[2], 'sum', ARGV[3])
redis.call('PUBLISH', KEYS[1], seq + 1)
return {1, seq + 1}
";

/// Tells every server `ARGV[1]`: a script, so that a cluster routes it to
/// the node of the channel's name like every other command of the fleet.
const TELL: &str = "return redis.call('PUBLISH', KEYS[1], ARGV[1])";

/// A fleet of servers running one limits file kept in Redis: a change made
/// on any of them — a route's limits, a key's override, a list entry, a
/// whole new version ([`change`](Self::change), [`publish`](Self::publish),
/// [`watch`](Self::watch)) — is written to Redis as the next numbered
/// version and published; every server applies it when the message wakes
/// it, or within half a second if it missed the message, and a server that
/// joins later starts on the current version. The fleet's copy wins over a
/// joining server's own file; the first server to join writes its own.
///
/// A copy Redis loses (restarted empty, flushed, evicted under
/// `maxmemory`) is put back by the servers running it, within half a
/// second, as the newest version any of them runs — never an older one —
/// and changes work again at once. A server joining meanwhile waits up to
/// a second for that before it writes its own file as the first version;
/// if it wrote one all the same, the running servers' newer version
/// replaces it. (Give the limiter's Redis `maxmemory-policy noeviction`, or
/// a Redis of its own: an evicting Redis drops limits and bans too.)
///
/// So a named limit changed on one server is never enforced with two
/// budgets for longer than that: its state is kept under its name (see
/// [`Live`](crate::Live)), and every server reads it under the new quota
/// within a second.
///
/// The copy lives in one hash (`seq`, the version's number, `text`, and
/// `sum`, a hash of the text) at the name given, whose channel of the same
/// name carries the numbers. Every topology the
/// [`RedisBackend`] speaks, with its TLS and ACL settings:
/// - one server;
/// - a cluster: the hash is one key, in one slot; the channel is classic
///   pub/sub, which a cluster carries to the subscribers of every node, so
///   each server subscribes to any node that answers;
/// - Sentinel: the master the sentinels name, followed through a failover,
///   the subscription made again on the new master.
///
/// Redis replicates asynchronously: a change its master took and lost in
/// a failover before a replica had it would be kept by the servers that ran
/// it and unknown to the rest. So a change is acknowledged only once every
/// replica the master has confirmed it (`WAIT`, at most half a second);
/// else [`change`](Self::change) fails, saying the change may be lost, and
/// the servers that ran it put it back if it was (they always put back the
/// newest version they hold). Two versions with one number (one lost in a
/// failover, another written on the promoted replica) are told apart by
/// their `sum`: the fleet's copy wins, so every server runs one version.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use tower_ratelimit::config::{Fleet, Limits, LimitsFile};
///
/// let limits = Limits::new(LimitsFile::read("limits.toml")?);
/// let fleet = Fleet::connect("redis://127.0.0.1:6379", limits.clone()).await?;
/// // On any server: every server runs 20/min within a second.
/// fleet.change(|file| file.with_route_limits(None, "/api/search", "search = 20/min")).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    limits: Limits,
    /// The fleet's own connections (a `WAIT` must not hold up decisions).
    redis: RedisBackend,
    name: String,
    /// The number of the version this server runs.
    applied: AtomicU64,
    /// The number of the version whose text this server runs (behind
    /// `applied` when it refused a version it could not read): the newest
    /// it may put back when Redis lost the fleet's copy.
    held: AtomicU64,
    /// The task following the fleet (it holds only a weak reference).
    follower: OnceLock<tokio::task::AbortHandle>,
    /// Told of each key any server forgets.
    on_forget: std::sync::Mutex<Vec<OnForget>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(follower) = self.follower.get() {
            follower.abort();
        }
    }
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.inner.name)
            .field("topology", &self.topology())
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// The name of the fleet's copy when none is given.
    pub const DEFAULT_NAME: &'static str = "ratelimit:limits";

    /// Join the fleet on the Redis at `url`, any form
    /// [`RedisBackend::builder`] reads (one server, a cluster, Sentinel;
    /// its copy at [`DEFAULT_NAME`](Self::DEFAULT_NAME)), running `limits`.
    pub async fn connect(url: &str, limits: Limits) -> Result<Self, ConfigError> {
        Self::join(RedisBackend::builder(url), Self::DEFAULT_NAME, limits).await
    }

    /// Join the fleet whose copy is at `name` on the Redis `redis` is
    /// configured for (its topology, TLS and credentials; its timeout and
    /// key settings are not used): the current version is applied to
    /// `limits` before this returns (or `limits`' own is written, when the
    /// fleet has none yet), and followed from then on, on a task of the
    /// tokio runtime, until the last clone of the fleet is dropped. A
    /// Redis that does not answer is an error: try again later.
    pub async fn join(
        redis: RedisBackendBuilder,
        name: &str,
        limits: Limits,
    ) -> Result<Self, ConfigError> {
        let redis = redis
            .timeout(ANSWER_WITHIN)
            .connect()
            .await
            .map_err(|e| ConfigError::from_message(format!("the fleet's Redis: {e}")))?;
        let inner = Arc::new(Inner {
            limits,
            redis,
            name: name.to_owned(),
            applied: AtomicU64::new(0),
            held: AtomicU64::new(0),
            follower: OnceLock::new(),
            on_forget: std::sync::Mutex::new(Vec::new()),
        });
        let fleet = Self { inner };
        // The first to join writes its own version; the others read theirs.
        // A copy Redis lost is put back by the servers running it: wait for
        // them before writing this server's file in its place.
        fleet.await_copy(LOST_COPY_WAIT).await?;
        let own = fleet.inner.limits.current();
        match fleet.write(0, own.text()).await? {
            Written::Yes(seq) => {
                fleet.inner.applied.store(seq, Ordering::Release);
                fleet.inner.held.store(seq, Ordering::Release);
            }
            Written::No(_) => fleet.sync().await?,
        }
        let (subscribed, listening) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(follow(Arc::downgrade(&fleet.inner), subscribed));
        let _ = fleet.inner.follower.set(task.abort_handle());
        // Listening before this returns, so that the next change wakes it
        // (a subscription that fails is made up for by polling).
        let _ = tokio::time::timeout(POLL_EVERY, listening).await;
        // A change made while it subscribed.
        fleet.sync().await?;
        Ok(fleet)
    }

    /// Which topology the fleet's Redis is: `standalone`, `cluster` or
    /// `sentinel`.
    pub fn topology(&self) -> &'static str {
        self.inner.redis.topology()
    }

    /// The limits this server runs.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The number of the fleet's version this server runs (1 for the
    /// first written).
    pub fn version(&self) -> u64 {
        self.inner.applied.load(Ordering::Acquire)
    }

    /// Make `change` to the fleet's current version and run the result on
    /// every server: written as the next version when no other change
    /// landed meanwhile, else made again on the one that did. The version
    /// made is returned, and runs here already; an error of `change` (an
    /// invalid quota, a route the file lacks) changes nothing. An error
    /// after the write (its replicas did not confirm it) says so: the
    /// change runs, but a failover now could lose it; make it again. A
    /// server that cannot read the fleet's version (a newer server wrote
    /// it) refuses to change it: its change would drop that version's.
    pub async fn change(
        &self,
        change: impl Fn(&LimitsFile) -> Result<LimitsFile, ConfigError>,
    ) -> Result<Arc<LimitsFile>, ConfigError> {
        for _ in 0..MAX_TRIES {
            self.sync().await?;
            // The version whose text runs here, read before that text: the
            // version counted as applied may be one whose text is not live
            // yet (`run`), and a change made on the text before it, written
            // as its successor, would drop what it changed.
            let seq = self.inner.held.load(Ordering::Acquire);
            let next = change(&self.inner.limits.current())?;
            if let Written::Yes(seq) = self.write(seq, next.text()).await? {
                self.run(seq, next);
                self.confirm().await?;
                return Ok(self.inner.limits.current());
            }
        }
        let held = self.inner.held.load(Ordering::Acquire);
        if held < self.version() {
            return Err(ConfigError::from_message(format!(
                "this server runs the fleet's version {held} and cannot read version {} (a newer \
                 server wrote it): make the change on a server that runs it",
                self.version()
            )));
        }
        Err(ConfigError::from_message(format!(
            "the fleet's limits changed {MAX_TRIES} times while this change was made; try again"
        )))
    }

    /// Tell every server of the fleet (this one too) that `key` was reset
    /// in the shared store, so that each runs what it gave
    /// [`on_forget`](Self::on_forget) — typically
    /// [`Backend::forget_local`](crate::backend::Backend::forget_local)
    /// under each policy the key is limited by — within a second: no
    /// server goes on refusing the key from a denial cache, a lease or a
    /// local fallback. A server whose subscription is down when the
    /// message is sent misses it.
    pub async fn forget(&self, key: &Key) -> Result<(), ConfigError> {
        let hex: String = key.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let mut tell = redis::cmd("EVAL");
        tell.arg(TELL).arg(1).arg(&self.inner.name);
        let _: i64 = self.command(tell.arg(format!("{FORGET}{hex}"))).await?;
        Ok(())
    }

    /// Run `forget` for each key a server of the fleet
    /// [forgets](Self::forget) from now on.
    pub fn on_forget(&self, forget: impl Fn(&Key) + Send + Sync + 'static) {
        let mut hooks = self
            .inner
            .on_forget
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        hooks.push(Arc::new(forget));
    }

    /// Run `file` on every server, as the fleet's next version.
    pub async fn publish(&self, file: LimitsFile) -> Result<Arc<LimitsFile>, ConfigError> {
        self.change(|_| Ok(file.clone())).await
    }

    /// Watch the file at `path` as [`Limits::watch`] does, and publish each
    /// valid new text to the fleet (an invalid one is refused here, and no
    /// server runs it).
    pub fn watch(
        &self,
        path: impl Into<PathBuf>,
        on_reload: impl Fn(Reload<'_>) + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        let on_reload = Arc::new(on_reload);
        let running = LimitsFile::clone(&self.inner.limits.current());
        watch_file(path.into(), running, move |path, read| {
            let (fleet, on_reload, path) = (fleet.clone(), on_reload.clone(), path.to_owned());
            async move {
                let published = match read {
                    Ok(file) => fleet.publish(file).await,
                    Err(error) => Err(error),
                };
                told(&path, published.as_deref(), &*on_reload);
            }
        })
    }

    /// Write `text` as the version after `seq`, if `seq` is still the
    /// fleet's.
    async fn write(&self, seq: u64, text: &str) -> Result<Written, ConfigError> {
        let mut change = redis::cmd("EVAL");
        change.arg(CHANGE).arg(1).arg(&self.inner.name);
        let (written, seq): (u8, u64) = self
            .command(change.arg(seq).arg(text).arg(sum(text)))
            .await?;
        Ok(if written == 1 {
            Written::Yes(seq)
        } else {
            Written::No(seq)
        })
    }

    /// Until the fleet's copy is in Redis, at most `within` (a fleet of
    /// none has none: then nothing comes).
    async fn await_copy(&self, within: Duration) -> Result<(), ConfigError> {
        let started = tokio::time::Instant::now();
        loop {
            let seq: Option<u64> = self
                .command(redis::cmd("HGET").arg(&self.inner.name).arg("seq"))
                .await?;
            if seq.is_some() || started.elapsed() >= within {
                return Ok(());
            }
            tokio::time::sleep(within / 10).await;
        }
    }

    /// Run the fleet's version if it is newer than this server's (or as
    /// new but another text: the fleet's copy wins); put this server's back
    /// if Redis holds an older one or none (it lost the copy).
    async fn sync(&self) -> Result<(), ConfigError> {
        let name = &self.inner.name;
        let (seq, stored_sum): (Option<u64>, Option<String>) = self
            .command(redis::cmd("HMGET").arg(name).arg("seq").arg("sum"))
            .await?;
        let seq = seq.unwrap_or(0);
        if seq < self.version() {
            return self.reseed().await;
        }
        let runs_it = self.inner.held.load(Ordering::Acquire) == seq;
        let same_text = || {
            stored_sum
                .as_deref()
                .is_none_or(|s| s == sum(self.inner.limits.current().text()))
        };
        if seq == self.version() && (!runs_it || same_text()) {
            return Ok(());
        }
        let (seq, text): (Option<u64>, Option<String>) = self
            .command(redis::cmd("HMGET").arg(name).arg("seq").arg("text"))
            .await?;
        let (Some(seq), Some(text)) = (seq, text) else {
            return Ok(());
        };
        match self.inner.limits.current().reparse(&text) {
            Ok(file) if seq == self.version() => self.replace(seq, file),
            Ok(file) => self.run(seq, file),
            Err(error) => {
                // A version this server cannot read (written by a newer
                // one, say): it keeps running its own, and says so once.
                self.inner.applied.fetch_max(seq, Ordering::AcqRel);
                log_refused(&error);
            }
        }
        Ok(())
    }

    /// Put the version this server runs back into Redis, unless Redis has
    /// as new a one: the newest any server holds wins, never an older.
    async fn reseed(&self) -> Result<(), ConfigError> {
        let held = self.inner.held.load(Ordering::Acquire);
        if held == 0 || held != self.version() {
            // This server runs a version it could not read: not its to put back.
            return Ok(());
        }
        let file = self.inner.limits.current();
        let mut reseed = redis::cmd("EVAL");
        reseed.arg(RESEED).arg(1).arg(&self.inner.name);
        let _put_back: u8 = self
            .command(reseed.arg(held).arg(file.text()).arg(sum(file.text())))
            .await?;
        #[cfg(feature = "tracing")]
        if _put_back == 1 {
            tracing::warn!(
                fleet_version = held,
                "limits: the fleet's copy was lost in Redis; put back"
            );
        }
        Ok(())
    }

    /// After a write: every replica the master has confirms it within
    /// [`CONFIRM_WITHIN`], else an error says a failover could lose it.
    async fn confirm(&self) -> Result<(), ConfigError> {
        let role: Vec<Value> = self.command(&redis::cmd("ROLE")).await?;
        let replicas = match role.get(2) {
            Some(Value::Array(replicas)) => replicas.len(),
            _ => 0,
        };
        if replicas == 0 {
            return Ok(());
        }
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(CONFIRM_WITHIN.as_millis() as u64);
        let confirmed: usize = self.command(&wait).await?;
        if confirmed < replicas {
            return Err(ConfigError::from_message(format!(
                "the change runs, but {confirmed} of the master's {replicas} replicas confirmed it \
                 within {CONFIRM_WITHIN:?}: a failover now could lose it; make it again"
            )));
        }
        Ok(())
    }

    /// `cmd` on the server that holds the fleet's copy.
    async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, ConfigError> {
        let answer = self.inner.redis.command_for(&self.inner.name, cmd).await;
        answer.map_err(|e| ConfigError::from_message(format!("the fleet's Redis: {e}")))
    }

    /// Run `file`, the fleet's version `seq` in place of another text of
    /// that number this server ran (one a failover lost).
    fn replace(&self, seq: u64, file: LimitsFile) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            fleet_version = seq,
            "limits: the fleet's copy of this version is another text (a failover lost this one); running the fleet's"
        );
        self.inner.limits.apply(file);
        self.inner.held.store(seq, Ordering::Release);
    }

    /// Run `file`, the fleet's version `seq`, unless a later one runs.
    fn run(&self, seq: u64, file: LimitsFile) {
        if self.inner.applied.fetch_max(seq, Ordering::AcqRel) < seq {
            #[cfg(feature = "tracing")]
            tracing::info!(
                fleet_version = seq,
                version = file.version(),
                "limits: the fleet's version live"
            );
            self.inner.limits.apply(file);
            self.inner.held.fetch_max(seq, Ordering::AcqRel);
        }
    }
}

enum Written {
    Yes(u64),
    No(#[allow(dead_code)] u64),
}

/// Follows the fleet for as long as it lives: each published number wakes
/// it, and it asks anyway every [`POLL_EVERY`]. Its subscription is made
/// again when it ends, and behind Sentinel when another master is named.
async fn follow(inner: Weak<Inner>, subscribed: tokio::sync::oneshot::Sender<()>) {
    let Some((redis, name)) = inner.upgrade().map(|i| (i.redis.clone(), i.name.clone())) else {
        return;
    };
    let mut subscribed = Some(subscribed);
    loop {
        let (mut messages, listening_to) = subscribe(&redis, &name).await;
        if let Some(told) = subscribed.take() {
            let _ = told.send(());
        }
        loop {
            let mut forgotten = None;
            match &mut messages {
                Some(stream) => {
                    let next = std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx));
                    match tokio::time::timeout(POLL_EVERY, next).await {
                        // The subscription ended: subscribe again.
                        Ok(None) => messages = None,
                        Ok(Some(message)) => forgotten = forgotten_key(message.get_payload_bytes()),
                        Err(_) => {}
                    }
                }
                None => tokio::time::sleep(POLL_EVERY).await,
            }
            let Some(inner) = inner.upgrade() else {
                return;
            };
            if let Some(key) = forgotten {
                let hooks = inner
                    .on_forget
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                for hook in hooks {
                    hook(&key);
                }
                continue;
            }
            let _ = Fleet { inner }.sync().await;
            // Another master named (Sentinel): its subscribers hear the
            // fleet now.
            let moved = redis.topology() == "sentinel"
                && redis.subscribable().first().map(|(at, _)| at) != listening_to.as_ref();
            if messages.is_none() || moved {
                break;
            }
        }
    }
}

/// A subscription to `name` on the first server of `redis` that takes
/// one, and which server that is; none while no server does.
async fn subscribe(
    redis: &RedisBackend,
    name: &str,
) -> (Option<redis::aio::PubSubStream>, Option<String>) {
    for (at, client) in redis.subscribable() {
        let subscribed = tokio::time::timeout(ANSWER_WITHIN, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(name).await?;
            Ok::<_, redis::RedisError>(pubsub.into_on_message())
        });
        if let Ok(Ok(messages)) = subscribed.await {
            return (Some(messages), Some(at));
        }
    }
    (None, None)
}

/// The key a `forget` message carries, if it is one.
fn forgotten_key(payload: &[u8]) -> Option<Key> {
    let hex = payload.strip_prefix(FORGET.as_bytes())?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = hex
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect();
    Key::from_encoded(&bytes?)
}

/// A short hash of a version's text, to tell two texts of one number apart.
fn sum(text: &str) -> String {
    Sha256::digest(text.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
