//! [`Fleet`]: one limits file for every server on a Redis, changed from any
//! of them.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures_core::Stream;

use redis::aio::ConnectionManager;
use redis::AsyncCommands;

use super::watch::{log_refused, told, watch_file};
use super::{ConfigError, Limits, LimitsFile, Reload};
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

/// Puts back version `ARGV[1]` (text `ARGV[2]`) if the stored one is older
/// or gone (Redis restarted empty, flushed, evicted the hash), and tells
/// every server; 1 if it did.
const RESEED: &str = r"
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
if seq >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'text', ARGV[2])
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
";

/// Writes a new version if the stored one is still `ARGV[1]`, and tells
/// every server: `{1, new}`, or `{0, stored}` when another change won.
const CHANGE: &str = r"
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
if seq ~= tonumber(ARGV[1]) then return {0, seq} end
redis.call('HSET', KEYS[1], 'seq', seq + 1, 'text', ARGV[2])
redis.call('PUBLISH', KEYS[1], seq + 1)
return {1, seq + 1}
";

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
/// The copy lives in one hash (`seq`, the version's number, and `text`) at
/// the name given, whose channel of the same name carries the numbers. On
/// a standalone Redis (or the primary a Sentinel names, through its URL).
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
    conn: ConnectionManager,
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
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// The name of the fleet's copy when none is given.
    pub const DEFAULT_NAME: &'static str = "ratelimit:limits";

    /// Join the fleet on the Redis at `url` (its copy at
    /// [`DEFAULT_NAME`](Self::DEFAULT_NAME)), running `limits`.
    pub async fn connect(url: &str, limits: Limits) -> Result<Self, ConfigError> {
        let client = redis::Client::open(url).map_err(|e| redis_error(&e))?;
        Self::join(client, Self::DEFAULT_NAME, limits).await
    }

    /// Join the fleet whose copy is at `name` on `client`'s Redis: the
    /// current version is applied to `limits` before this returns (or
    /// `limits`' own is written, when the fleet has none yet), and followed
    /// from then on, on a task of the tokio runtime, until the last clone
    /// of the fleet is dropped.
    pub async fn join(
        client: redis::Client,
        name: &str,
        limits: Limits,
    ) -> Result<Self, ConfigError> {
        let conn = ConnectionManager::new(client.clone())
            .await
            .map_err(|e| redis_error(&e))?;
        let inner = Arc::new(Inner {
            limits,
            conn,
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
        let task = tokio::spawn(follow(client, Arc::downgrade(&fleet.inner), subscribed));
        let _ = fleet.inner.follower.set(task.abort_handle());
        // Listening before this returns, so that the next change wakes it
        // (a subscription that fails is made up for by polling).
        let _ = tokio::time::timeout(POLL_EVERY, listening).await;
        // A change made while it subscribed.
        fleet.sync().await?;
        Ok(fleet)
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
    /// invalid quota, a route the file lacks) changes nothing.
    pub async fn change(
        &self,
        change: impl Fn(&LimitsFile) -> Result<LimitsFile, ConfigError>,
    ) -> Result<Arc<LimitsFile>, ConfigError> {
        for _ in 0..MAX_TRIES {
            self.sync().await?;
            let seq = self.version();
            let next = change(&self.inner.limits.current())?;
            if let Written::Yes(seq) = self.write(seq, next.text()).await? {
                self.run(seq, next);
                return Ok(self.inner.limits.current());
            }
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
        let mut conn = self.inner.conn.clone();
        let _: i64 = conn
            .publish(&self.inner.name, format!("{FORGET}{hex}"))
            .await
            .map_err(|e| redis_error(&e))?;
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
        let mut conn = self.inner.conn.clone();
        let (written, seq): (u8, u64) = redis::Script::new(CHANGE)
            .key(&self.inner.name)
            .arg(seq)
            .arg(text)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(&e))?;
        Ok(if written == 1 {
            Written::Yes(seq)
        } else {
            Written::No(seq)
        })
    }

    /// Until the fleet's copy is in Redis, at most `within` (a fleet of
    /// none has none: then nothing comes).
    async fn await_copy(&self, within: Duration) -> Result<(), ConfigError> {
        let mut conn = self.inner.conn.clone();
        let started = tokio::time::Instant::now();
        loop {
            let seq: Option<u64> = conn
                .hget(&self.inner.name, "seq")
                .await
                .map_err(|e| redis_error(&e))?;
            if seq.is_some() || started.elapsed() >= within {
                return Ok(());
            }
            tokio::time::sleep(within / 10).await;
        }
    }

    /// Run the fleet's version if it is newer than this server's; put this
    /// server's back if Redis holds an older one or none (it lost the copy).
    async fn sync(&self) -> Result<(), ConfigError> {
        let mut conn = self.inner.conn.clone();
        let name = &self.inner.name;
        let seq: Option<u64> = conn.hget(name, "seq").await.map_err(|e| redis_error(&e))?;
        let seq = seq.unwrap_or(0);
        if seq < self.version() {
            return self.reseed().await;
        }
        if seq == self.version() {
            return Ok(());
        }
        let (seq, text): (Option<u64>, Option<String>) = redis::cmd("HMGET")
            .arg(name)
            .arg("seq")
            .arg("text")
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error(&e))?;
        let (Some(seq), Some(text)) = (seq, text) else {
            return Ok(());
        };
        match self.inner.limits.current().reparse(&text) {
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
        let mut conn = self.inner.conn.clone();
        let _put_back: u8 = redis::Script::new(RESEED)
            .key(&self.inner.name)
            .arg(held)
            .arg(file.text())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(&e))?;
        #[cfg(feature = "tracing")]
        if _put_back == 1 {
            tracing::warn!(
                fleet_version = held,
                "limits: the fleet's copy was lost in Redis; put back"
            );
        }
        Ok(())
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
/// it, and it asks anyway every [`POLL_EVERY`].
async fn follow(
    client: redis::Client,
    inner: Weak<Inner>,
    subscribed: tokio::sync::oneshot::Sender<()>,
) {
    let name = match inner.upgrade() {
        Some(inner) => inner.name.clone(),
        None => return,
    };
    let mut subscribed = Some(subscribed);
    loop {
        let mut messages = match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&name).await {
                Ok(()) => Some(pubsub.into_on_message()),
                Err(_) => None,
            },
            Err(_) => None,
        };
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
            if messages.is_none() {
                break;
            }
        }
    }
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

/// A Redis error as a limits error.
fn redis_error(error: &redis::RedisError) -> ConfigError {
    ConfigError::from_message(format!("the fleet's Redis: {error}"))
}
