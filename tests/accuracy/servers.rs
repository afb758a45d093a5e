//! The k application servers: each the example server's binary, run as a
//! user runs it (its own Redis connections behind a breaker, a local
//! fallback of its share, the fleet's limits), and asked over HTTP. What a
//! decision was is read off the response as a client reads it: admitted
//! is a 200, refused a 429, and who decided is the limit its
//! `RateLimit-Policy` header shows (the whole limit: Redis; the server's
//! share: the fallback; anything else: an error the checker counts).

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower_ratelimit::config::LimitsFile;
use tower_ratelimit::key::RequestHead;
use tower_ratelimit::Policy;

use crate::support::example::ExampleServer;

/// A limited route of the example: its path, and the prefix of its keys
/// in the history.
pub struct Route {
    pub path: &'static str,
    pub prefix: &'static str,
}

/// One route per algorithm the checker knows, keyed by `x-user-id`; each
/// key's clients ask 2–5 times its limit, so that every limit binds.
pub const ROUTES: [Route; 4] = [
    Route {
        path: "/api/user",
        prefix: "fixed",
    },
    Route {
        path: "/api/search",
        prefix: "sliding",
    },
    Route {
        path: "/api/burst",
        prefix: "log",
    },
    Route {
        path: "/api/ip",
        prefix: "gcra",
    },
];

/// The example's limits file for the run: the four routes above with
/// small limits, one algorithm each; the rest as `examples/limits.toml`
/// has them (the example refuses a file that leaves one of its routes
/// unlimited).
pub const FILE: &str = r#"[keys]
user = { header = "x-user-id", or = "ip" }
user-endpoint = { all = ["user", "endpoint"] }

[tiers]
free = "key-free = 100/h"
pro = "key-pro = 1000/h"
enterprise = "key-enterprise = 10000/h"

[tier_of]
header = "x-api-key"
values = { free-demo = "free", pro-demo = "pro", enterprise-demo = "enterprise" }

[[routes]]
path = "/api/user"
key = "user"
algorithm = "fixed-window"
limits = "fixed = 20/2s"

[[routes]]
path = "/api/search"
key = "user"
algorithm = "sliding-window"
limits = "sliding = 30/2s"

[[routes]]
path = "/api/burst"
key = "user"
algorithm = "sliding-log"
limits = "log = 15/3s"

[[routes]]
path = "/api/ip"
key = "user"
algorithm = "gcra"
limits = "gcra = 8/s burst 4"

[[routes]]
path = "/api/key"
tiered = true

[[routes]]
path = "/api/quota"
key = "user"
limits = "quota = 60/min"

[[routes]]
method = "POST"
path = "/api/login"
limits = "logins = 5/15min"

[[routes]]
path = "/api/tokens"
key = "user"
limits = "tokens = 1000/min"

[[routes]]
path = "/api/slow"
key = "user"
in_flight = { name = "slow", permits = 2, lease = "15s" }

[[routes]]
path = "/api/report"
key = "user"
limits = "report = 60/min"
"#;

/// The limit changed mid-run (through one server's `PUT /admin/limits`,
/// reaching the others through the fleet), and what it becomes.
pub const CHANGED: (&str, [&str; 2]) = ("/api/search", ["12/2s", "30/2s"]);

/// How long a decision may take before a server decides alone: long
/// enough that a busy machine's scheduling is not taken for a failing
/// Redis, short enough that a fault is felt.
pub const TIMEOUT: Duration = Duration::from_millis(250);

/// The bearer token of the servers' `/admin` routes.
const ADMIN_TOKEN: &str = "accuracy";

/// One example server, and the connections the clients keep to it.
pub struct Server {
    /// Behind a lock: its output's receiver is for one thread at a time.
    process: Mutex<ExampleServer>,
    port: u16,
    client: Client<HttpConnector, Empty<Bytes>>,
    /// Servers in all: the fallback's share of a limit is `⌈limit / k⌉`.
    servers: u32,
}

/// What a server decided, with the limit it applied.
pub struct Answer {
    pub admitted: bool,
    pub origin: &'static str,
    pub applied: Applied,
}

/// A policy's first limit, as the history names it.
#[derive(Clone, Debug, PartialEq)]
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

    /// An answer applying no limit the run knows.
    fn unknown() -> Self {
        Self {
            algorithm: "fixed_window".into(),
            limit: 0,
            window_us: 0,
            burst: 0,
        }
    }
}

/// The policy `file` gives `path`.
pub fn policy_of(file: &LimitsFile, path: &str) -> Policy {
    let req = http::Request::get(path).body(()).unwrap();
    let head = RequestHead::from(&req);
    file.policy(&http::Method::GET, path, &head)
        .expect("a route")
}

/// Every version of `route`'s limit the run may set: the file's, and
/// each `CHANGED` one.
pub fn versions(route: &Route) -> Vec<Applied> {
    let file = LimitsFile::parse(FILE).expect("the run's limits file");
    let mut all = vec![Applied::of(&policy_of(&file, route.path))];
    if route.path == CHANGED.0 {
        for limits in CHANGED.1 {
            let changed = changed_file(limits);
            all.push(Applied::of(&policy_of(&changed, route.path)));
        }
    }
    all
}

/// The run's file with the changed route's limit at `limits` (its name
/// kept, as the example's `PUT /admin/limits` keeps it).
pub fn changed_file(limits: &str) -> LimitsFile {
    let file = LimitsFile::parse(FILE).expect("the run's limits file");
    let name = policy_of(&file, CHANGED.0).limits()[0].name().to_owned();
    file.with_route_limits(None, CHANGED.0, &format!("{name} = {limits}"))
        .expect("a valid change")
}

impl Server {
    /// A server whose decisions go to, and whose fleet is on, `store`;
    /// `servers` in all share a limit while Redis fails. `file` is the
    /// limits file's path.
    pub fn start(store: &str, file: &str, servers: u32) -> Result<Self, String> {
        let timeout = TIMEOUT.as_millis().to_string();
        let count = servers.to_string();
        let process = ExampleServer::try_start(&[
            ("REDIS_URL", store),
            ("LIMITS_FILE", file),
            ("SERVERS", &count),
            ("STORE_TIMEOUT_MS", &timeout),
            ("ON_STORE_FAILURE", "local"),
            ("ADMIN_TOKEN", ADMIN_TOKEN),
            // One address asks for every client here: no cap on the ids
            // it brings.
            ("IDS_PER_IP", "1000000"),
        ])?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build_http();
        Ok(Self {
            port: process.port,
            process: Mutex::new(process),
            client,
            servers,
        })
    }

    /// Decides one request of client `id` on `route`: `versions`, the
    /// route's limits the run may have set.
    pub async fn decide(&self, route: &Route, id: &str, versions: &[Applied]) -> Answer {
        let uri = format!("http://127.0.0.1:{}{}", self.port, route.path);
        let req = Request::get(uri)
            .header("x-user-id", id)
            .body(Empty::new())
            .unwrap();
        // Bounded: the server's own timeout answers long before this.
        let answered = tokio::time::timeout(Duration::from_secs(10), async {
            let response = self.client.request(req).await.ok()?;
            let status = response.status().as_u16();
            let policy = response
                .headers()
                .get("ratelimit-policy")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            response.into_body().collect().await.ok()?;
            Some((status, policy))
        })
        .await;
        let Ok(Some((status, Some(policy)))) = answered else {
            return Answer::error();
        };
        let admitted = match status {
            200 => true,
            429 => false,
            _ => return Answer::error(),
        };
        match self.read(&policy, versions) {
            Some((origin, applied)) => Answer {
                admitted,
                origin,
                applied,
            },
            None => Answer {
                admitted,
                origin: "error",
                applied: Applied::unknown(),
            },
        }
    }

    /// Who decided and on which version of the limit, from the
    /// `RateLimit-Policy` header (`"name";q=<quota>;w=<seconds>`, the
    /// quota a burst's size: a window's limit, a GCRA's burst): the whole
    /// quota is Redis's, a `⌈quota / k⌉` share the fallback's.
    fn read(&self, header: &str, versions: &[Applied]) -> Option<(&'static str, Applied)> {
        let quota: u32 = header
            .split(';')
            .find_map(|part| part.trim().strip_prefix("q="))?
            .parse()
            .ok()?;
        let share = |v: &Applied| v.burst.div_ceil(self.servers);
        versions.iter().find_map(|v| {
            if quota == v.burst {
                Some(("redis", v.clone()))
            } else if quota == share(v) {
                Some(("fallback", v.clone()))
            } else {
                None
            }
        })
    }

    /// Changes `CHANGED`'s route to `limits` on this server, for all.
    pub fn change(&self, limits: &str) -> Result<(), String> {
        let path = format!("/admin/limits{}", CHANGED.0);
        let bearer = format!("Bearer {ADMIN_TOKEN}");
        let process = self.process.lock().unwrap();
        let response = process.send("PUT", &path, &[("authorization", bearer.as_str())], limits);
        match response.split_whitespace().nth(1) {
            Some("200") | Some("204") => Ok(()),
            _ => Err(format!(
                "PUT {path}: {}",
                response.lines().next().unwrap_or("")
            )),
        }
    }
}

impl Answer {
    /// No answer: the connection failed, or a status no limit gives.
    fn error() -> Self {
        Self {
            admitted: false,
            origin: "error",
            applied: Applied::unknown(),
        }
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
