//! The k application servers: each the library as a service would hold it
//! — its own Redis connections behind a breaker with a local fallback of
//! its share, and its own copy of the fleet's limits file.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::Request;
use tower_ratelimit::backend::{Backend, Breaker, Fallback, MemoryBackend, RedisBackend};
use tower_ratelimit::clock::{Clock, MonotonicClock};
use tower_ratelimit::config::{Fleet, Limits, LimitsFile};
use tower_ratelimit::decision::Origin;
use tower_ratelimit::key::{Key, RequestHead};
use tower_ratelimit::layer::PolicyResolver;
use tower_ratelimit::Policy;

/// A route of the limits file: its path, the prefix of its keys in the
/// history, and the limits it starts with.
pub struct Route {
    pub path: &'static str,
    pub prefix: &'static str,
}

/// One route per algorithm the checker knows; each key's clients ask
/// 2–5 times its limit, so that every limit binds.
pub const ROUTES: [Route; 4] = [
    Route {
        path: "/fixed",
        prefix: "fixed",
    },
    Route {
        path: "/sliding",
        prefix: "sliding",
    },
    Route {
        path: "/log",
        prefix: "log",
    },
    Route {
        path: "/gcra",
        prefix: "gcra",
    },
];

pub const FILE: &str = r#"[keys]
user = { header = "x-user-id" }

[[routes]]
path = "/fixed"
key = "user"
algorithm = "fixed-window"
limits = "fixed = 20/2s"

[[routes]]
path = "/sliding"
key = "user"
algorithm = "sliding-window"
limits = "sliding = 30/2s"

[[routes]]
path = "/log"
key = "user"
algorithm = "sliding-log"
limits = "log = 15/3s"

[[routes]]
path = "/gcra"
key = "user"
algorithm = "gcra"
limits = "gcra = 8/s burst 4"
"#;

/// The limit changed mid-run, and what it becomes.
pub const CHANGED: (&str, [&str; 2]) = ("/sliding", ["sliding = 12/2s", "sliding = 30/2s"]);

/// How long a decision may take before the server decides alone: long
/// enough that a busy machine's scheduling is not taken for a failing
/// Redis, short enough that a fault is felt.
pub const TIMEOUT: Duration = Duration::from_millis(250);

type Decider = Fallback<Breaker<RedisBackend>, MemoryBackend>;

pub struct Server {
    backend: Decider,
    /// The fallback's clock: its windows are aligned to it.
    clock: MonotonicClock,
    pub limits: Limits,
    pub fleet: Fleet,
}

/// What a server decided, with the limit it applied.
pub struct Answer {
    pub admitted: bool,
    pub origin: &'static str,
    pub applied: Applied,
}

/// A policy's first limit, as the history names it.
pub struct Applied {
    pub algorithm: String,
    pub limit: u32,
    pub window_us: u128,
    pub burst: u32,
}

impl Applied {
    pub fn of(policy: &Policy) -> Self {
        let limit = &policy.limits()[0];
        let quota = limit.quota();
        Self {
            algorithm: limit.algorithm().to_string().replace('-', "_"),
            limit: quota.limit(),
            window_us: quota.window().as_micros(),
            burst: quota.burst().unwrap_or(quota.limit()),
        }
    }

    /// The `policy` event of keys starting with `prefix`.
    pub fn event(&self, prefix: &str) -> String {
        format!(
            "prefix={prefix} algorithm={} limit={} window_us={} burst={}",
            self.algorithm, self.limit, self.window_us, self.burst
        )
    }
}

impl Server {
    /// A server whose decisions go to `store` and whose limits follow the
    /// fleet on `fleet`; `servers` in all share a limit while Redis fails.
    pub async fn start(store: &str, fleet: &str, servers: u32) -> Result<Self, String> {
        let redis = RedisBackend::builder(store)
            .timeout(TIMEOUT)
            .connect()
            .await
            .map_err(|e| format!("connecting to {store}: {e}"))?;
        let clock = MonotonicClock::new();
        let local = MemoryBackend::builder()
            .servers(servers)
            .clock(clock.clone())
            .build();
        let limits = Limits::new(LimitsFile::parse(FILE).unwrap());
        let fleet = Fleet::connect(fleet, limits.clone())
            .await
            .map_err(|e| format!("joining the fleet on {fleet}: {e}"))?;
        Ok(Self {
            backend: redis.with_breaker().or_fallback(local),
            clock,
            limits,
            fleet,
        })
    }

    /// How far the fallback's clock is ahead of the wall clock, in µs.
    pub fn clock_offset(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros();
        self.clock.now().as_u64() as i64 - wall as i64
    }

    /// Decides one request of client `id` on `route`.
    pub async fn decide(&self, route: &Route, id: &str) -> Answer {
        let req = Request::get(route.path).body(()).unwrap();
        let policy = self
            .limits
            .policies()
            .resolve(&RequestHead::from(&req))
            .expect("every route has a policy");
        let key = Key::new("user", id);
        // Bounded: the backend's own timeout answers long before this.
        let decided = tokio::time::timeout(
            Duration::from_secs(10),
            self.backend.check(&key, &policy, 1),
        )
        .await;
        let (admitted, origin) = match decided {
            Ok(Ok(decision)) => (decision.is_allowed(), origin(decision.origin())),
            Ok(Err(_)) | Err(_) => (false, "error"),
        };
        Answer {
            admitted,
            origin,
            applied: Applied::of(&policy),
        }
    }
}

/// Who decided, as the history names it.
fn origin(origin: Origin) -> &'static str {
    match origin {
        Origin::Fallback | Origin::BreakerOpen => "fallback",
        Origin::Primary | Origin::Cached | Origin::Leased => "redis",
        _ => "error",
    }
}

/// The servers running now: a slot each, empty while it restarts.
pub struct Servers {
    slots: Vec<RwLock<Option<Arc<Server>>>>,
}

impl Servers {
    pub fn new(servers: Vec<Server>) -> Self {
        let slots = servers
            .into_iter()
            .map(|s| RwLock::new(Some(Arc::new(s))))
            .collect();
        Self { slots }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Server `i`, if it runs.
    pub fn get(&self, i: usize) -> Option<Arc<Server>> {
        self.slots[i].read().unwrap().clone()
    }

    /// A running server, starting from `from`.
    pub fn pick(&self, from: usize) -> Option<(usize, Arc<Server>)> {
        (0..self.len())
            .map(|i| (from + i) % self.len())
            .find_map(|i| self.get(i).map(|s| (i, s)))
    }

    /// Stops server `i`: gives it back to be dropped.
    pub fn stop(&self, i: usize) -> Option<Arc<Server>> {
        self.slots[i].write().unwrap().take()
    }

    pub fn put(&self, i: usize, server: Server) {
        *self.slots[i].write().unwrap() = Some(Arc::new(server));
    }
}
