//! The Redis a run decides on, and the faults it can be made to suffer.

use std::fmt;
use std::time::{Duration, Instant};

use crate::support::proxy::Proxy;
use crate::support::sentinel::Sentinels;
use crate::support::{RedisCluster, RedisServer};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    Standalone,
    Sentinel,
    Cluster,
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Standalone => "standalone",
            Self::Sentinel => "sentinel",
            Self::Cluster => "cluster",
        })
    }
}

/// A fault of the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Redis killed, and restarted empty.
    Kill,
    /// Redis stopped (SIGSTOP), then thawed.
    Freeze,
    /// The primary killed; its replica takes over.
    Failover,
    /// One server's link to Redis answers later than its timeout.
    Latency,
    /// One server cut off from Redis.
    Partition,
    /// A limit changed on one server, for all.
    LimitChange,
    /// One server stopped, and started again with nothing local.
    ServerRestart,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Freeze => "freeze",
            Self::Failover => "failover",
            Self::Latency => "latency",
            Self::Partition => "partition",
            Self::LimitChange => "limit_change",
            Self::ServerRestart => "server_restart",
        }
    }
}

pub enum Store {
    /// One Redis; each server reaches it through a proxy of its own.
    Standalone {
        redis: RedisServer,
        proxies: Vec<Proxy>,
    },
    Sentinel(Sentinels),
    Cluster(RedisCluster),
}

impl Store {
    /// Starts `topology` for `servers` servers.
    pub async fn start(topology: Topology, servers: usize) -> Self {
        match topology {
            Topology::Standalone => {
                let redis = blocking(RedisServer::start).await;
                let mut proxies = Vec::new();
                for _ in 0..servers {
                    proxies.push(Proxy::start(redis.port).await);
                }
                Self::Standalone { redis, proxies }
            }
            Topology::Sentinel => Self::Sentinel(blocking(Sentinels::start).await),
            Topology::Cluster => Self::Cluster(blocking(RedisCluster::start_with_replicas).await),
        }
    }

    /// The faults this topology can suffer, in the schedule's order.
    pub fn faults(&self) -> Vec<Fault> {
        match self {
            Self::Standalone { .. } => vec![
                Fault::Kill,
                Fault::Freeze,
                Fault::Latency,
                Fault::Partition,
                Fault::LimitChange,
                Fault::ServerRestart,
            ],
            Self::Sentinel(_) | Self::Cluster(_) => vec![
                Fault::Freeze,
                Fault::LimitChange,
                Fault::ServerRestart,
                Fault::Failover,
            ],
        }
    }

    /// Where server `i` sends its decisions and finds its fleet.
    pub fn url_for(&self, i: usize) -> String {
        match self {
            Self::Standalone { proxies, .. } => format!("redis://127.0.0.1:{}", proxies[i].port),
            Self::Sentinel(sentinels) => sentinels.url(),
            Self::Cluster(cluster) => cluster.urls().join(","),
        }
    }

    /// How long Redis stays frozen: under Sentinel's and the cluster's
    /// one-second failure detection, which would otherwise fail it over.
    pub fn freeze_for(&self) -> Duration {
        match self {
            Self::Standalone { .. } => Duration::from_secs(3),
            Self::Sentinel(_) | Self::Cluster(_) => Duration::from_millis(500),
        }
    }

    /// The process a freeze stops: the primary (of the first shard).
    fn primary(&self) -> &RedisServer {
        match self {
            Self::Standalone { redis, .. } => redis,
            Self::Sentinel(sentinels) => &sentinels.primary,
            Self::Cluster(cluster) => &cluster.nodes[0],
        }
    }

    pub fn freeze(&self) {
        self.primary().pause();
    }

    pub fn thaw(&self) {
        self.primary().resume();
    }

    /// Kills standalone Redis (it stays down until `restart`).
    pub fn kill(&mut self) {
        if let Self::Standalone { redis, .. } = self {
            redis.kill();
        }
    }

    /// Starts standalone Redis again, empty, and waits until it answers.
    pub fn restart(&mut self) {
        if let Self::Standalone { redis, .. } = self {
            redis.restart();
            wait(Duration::from_secs(20), "Redis to answer", || {
                redis.cli(&["PING"]).trim() == "PONG"
            });
        }
    }

    /// Kills the primary and waits (at most 20 s) for its replica's
    /// promotion.
    pub fn fail_over(&mut self) {
        match self {
            Self::Standalone { .. } => {}
            Self::Sentinel(sentinels) => {
                sentinels.primary.kill();
                wait(Duration::from_secs(20), "the replica's promotion", || {
                    sentinels.replica_is_master()
                });
            }
            Self::Cluster(cluster) => {
                cluster.nodes[0].kill();
                let masters = |cluster: &RedisCluster| {
                    cluster.nodes[1..]
                        .iter()
                        .filter(|n| n.cli(&["ROLE"]).starts_with("master"))
                        .count()
                };
                wait(Duration::from_secs(20), "the replica's promotion", || {
                    masters(cluster) == 3
                });
            }
        }
    }

    /// Whether a failover loses one shard's states of several (a
    /// cluster's), not every state.
    pub fn failing_is_one_shard(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Whether the Redis key `name` lives on the primary a failover
    /// kills: it answers for the key itself, not with `MOVED`.
    pub fn on_failing_primary(&self, name: &str) -> bool {
        match self {
            Self::Cluster(cluster) => !cluster.nodes[0].cli(&["EXISTS", name]).contains("MOVED"),
            _ => true,
        }
    }

    /// Whether the Redis key `name` holds a state, on whichever primary
    /// (a cluster's) has its slot.
    pub fn holds(&self, name: &str) -> bool {
        match self {
            Self::Cluster(cluster) => cluster
                .nodes
                .iter()
                .any(|n| n.cli(&["EXISTS", name]) == "1"),
            Self::Standalone { redis, .. } => redis.cli(&["EXISTS", name]) == "1",
            Self::Sentinel(sentinels) => sentinels.primary.cli(&["EXISTS", name]) == "1",
        }
    }

    pub fn proxy(&self, i: usize) -> Option<&Proxy> {
        match self {
            Self::Standalone { proxies, .. } => proxies.get(i),
            _ => None,
        }
    }
}

/// Waits until `done`, failing the run after `limit`.
fn wait(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs blocking `f` on a thread of its own.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}
