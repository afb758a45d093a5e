//! Real Redis servers of the tests' own: each test starts its own
//! `redis-server` processes on free ports (and a Redis Cluster when it needs
//! one) and stops them when dropped. No test touches a server it did not
//! start.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A `redis-server` (or `valkey-server`) process of our own.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

/// A port free now, below the range the kernel gives clients' ports from
/// (32768–60999 on Linux, 49152 and up elsewhere): a client that keeps
/// reconnecting to a server that is down can otherwise be given that very
/// port and connect to itself, and the server cannot bind it again when
/// it restarts.
fn free_port() -> u16 {
    port_in(20_000, 32_768)
}

/// A free port in `from..to`, tried in an order of this process's own so
/// that test processes running at once seldom try the same ones.
fn port_in(from: u16, to: u16) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let seed = std::process::id().wrapping_mul(7_919) ^ nanos;
    let _ = NEXT.compare_exchange(0, seed | 1, Ordering::Relaxed, Ordering::Relaxed);
    let span = u32::from(to - from);
    loop {
        // A stride prime to the span visits every port before repeating.
        let n = NEXT.fetch_add(7_919, Ordering::Relaxed);
        let port = from + (n % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The store timeout of a test of agreement (a decision compared with
/// another, a count of calls): seconds, so that a busy machine delays such
/// a test and never fails it. Tests of timing set their own.
pub const AGREE: std::time::Duration = std::time::Duration::from_secs(5);

/// A fixed-size state as the scripts store it (common.lua): its end (µs)
/// and up to two counts, read from the text "end a [b]", a bare "end", or
/// one integer of 19 digits (the end's 13 in milliseconds, then each
/// count's 3); `None` for what is none of these.
pub fn state_parts(text: &str) -> Option<(u64, u64, u64)> {
    let text = text.trim();
    if text.len() == 19 && text.bytes().all(|b| b.is_ascii_digit()) {
        let number = |range: std::ops::Range<usize>| text[range].parse::<u64>().ok();
        return Some((number(0..13)? * 1000, number(13..16)?, number(16..19)?));
    }
    let mut words = text.split(' ').map(|w| w.parse::<u64>().ok());
    let end = words.next()??;
    let a = words.next().unwrap_or(Some(0))?;
    let b = words.next().unwrap_or(Some(0))?;
    words.next().is_none().then_some((end, a, b))
}

/// A free port for a cluster node, with port + 10000 (its bus) free too:
/// both below the clients' range.
pub fn cluster_port() -> u16 {
    loop {
        let port = port_in(10_000, 22_768);
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A fresh folder of this process's for `tag`, under the system's temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tower-ratelimit-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `program` can be run here.
pub fn available(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The least privilege a limiter under the `rl:` prefix needs, as
/// `guide::backends` gives it (its `ACL SETUSER limiter` line, with the
/// commands it adds for the packed format and for a shared capacity):
/// every test of the Redis backend runs as this user, so a command the
/// crate sends that the guide does not list fails the suite.
pub fn limiter_acl() -> Vec<String> {
    let guide = include_str!("../../../src/guide/backends.md");
    let line = guide
        .lines()
        .find_map(|l| l.strip_prefix("ACL SETUSER limiter "))
        .expect("the guide shows the limiter's ACL user");
    let mut rules: Vec<String> = line
        .split_whitespace()
        .map(|rule| match rule {
            ">password" => ">limiter-secret".to_owned(),
            rule => rule.to_owned(),
        })
        .collect();
    let text = guide.split_whitespace().collect::<Vec<_>>().join(" ");
    for marker in [
        "With the packed key format (below), add `",
        "for a shared capacity on Redis (`layer::fair_share`), add `",
    ] {
        let at = text.find(marker).expect("the guide names what each adds") + marker.len();
        let added = &text[at..at + text[at..].find('`').unwrap()];
        rules.extend(added.split_whitespace().map(str::to_owned));
    }
    rules.insert(0, "reset".to_owned());
    rules
}

impl RedisServer {
    /// Start `redis-server` on a free port.
    pub fn start() -> Self {
        Self::start_with("redis-server", &[])
    }

    /// Start `redis-server` on `port` (one a test reserved and left unused).
    pub fn start_on_port(port: u16) -> Self {
        Self::spawn("redis-server", port, temp_dir("redis"), &[])
    }

    /// The URL of a server that the cases of the calling test share
    /// (each on keys of its own): started on first use, stopped when the
    /// test's thread ends.
    pub fn per_thread_url() -> String {
        thread_local! {
            static SERVER: (RedisServer, String) = {
                let server = RedisServer::start();
                let url = server.limiter_url();
                (server, url)
            };
        }
        SERVER.with(|(_, url)| url.clone())
    }

    /// A port nothing listens on (yet).
    pub fn unused_port() -> u16 {
        free_port()
    }

    /// Start `program` (redis-server or valkey-server) with extra arguments.
    /// A free port can be taken by another test between being found and
    /// being bound: a server that exits at once is started again elsewhere.
    pub fn start_with(program: &str, extra: &[&str]) -> Self {
        for _ in 0..4 {
            if let Some(server) = Self::try_spawn(program, free_port(), temp_dir("redis"), extra) {
                return server;
            }
        }
        Self::spawn(program, free_port(), temp_dir("redis"), extra)
    }

    fn spawn(program: &str, port: u16, dir: PathBuf, extra: &[&str]) -> Self {
        let log = dir.join(format!("{port}.log"));
        Self::try_spawn(program, port, dir, extra).unwrap_or_else(|| {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = said.lines().rev().take(5).collect();
            panic!("{program} on port {port} did not start: {tail:?}")
        })
    }

    /// The server, once it answers; `None` if it exited (its port taken).
    pub(crate) fn try_spawn(
        program: &str,
        port: u16,
        dir: PathBuf,
        extra: &[&str],
    ) -> Option<Self> {
        let child = Command::new(program)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            // What it says, where a test that finds it not started reads it.
            .arg("--logfile")
            .arg(dir.join(format!("{port}.log")))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {program}: {e} (scripts/test installs redis-server)")
            });
        let mut server = Self { child, port, dir };
        server.wait_ready().then_some(server)
    }

    /// A backend connected to this server, as the least-privileged user
    /// the guide shows.
    #[cfg(feature = "redis")]
    pub async fn backend(&self) -> tower_ratelimit::backend::RedisBackend {
        tower_ratelimit::backend::RedisBackend::builder(&self.limiter_url())
            .timeout(AGREE)
            .connect()
            .await
            .unwrap()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Run `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Whether the server answers within 10 s (false at once if it exited).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.cli(&["PING"]) == "PONG" {
                return true;
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    /// EVALSHA calls the server has answered so far.
    pub fn evalsha_calls(&self) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Add the least-privileged user a limiter needs (README, "ACL users")
    /// and return a URL that connects as it.
    pub fn limiter_url(&self) -> String {
        let rules = limiter_acl();
        let mut args = vec!["ACL", "SETUSER", "limiter"];
        args.extend(rules.iter().map(String::as_str));
        let answer = self.cli(&args);
        assert_eq!(answer, "OK", "ACL SETUSER: {answer}");
        format!("redis://limiter:limiter-secret@127.0.0.1:{}", self.port)
    }

    /// Reads from clients the server has processed so far: about one per
    /// round trip (a pipeline arrives in one).
    pub fn reads_processed(&self) -> u64 {
        let stats = self.cli(&["INFO", "stats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("total_reads_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Microseconds on the server's clock.
    pub fn time_micros(&self) -> u64 {
        let out = self.cli(&["TIME"]);
        let mut parts = out.lines().map(|l| l.trim().parse::<u64>().unwrap());
        parts.next().unwrap() * 1_000_000 + parts.next().unwrap()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freeze the process (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Let a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Stop the process (as a crash would), keeping the port for a restart.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start again on the same port, empty (as after a failover that lost scripts and data).
    pub fn restart(&mut self) {
        self.kill();
        // A folder of its own: the old one goes with the old server, here.
        let fresh = Self::spawn("redis-server", self.port, temp_dir("redis"), &[]);
        *self = fresh;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three primaries, no replicas.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three primaries, no replicas.
    pub fn start() -> Self {
        Self::start_with(0, 5_000)
    }

    /// Three primaries and a replica each; a primary that does not answer
    /// for a second is failed over.
    pub fn start_with_replicas() -> Self {
        Self::start_with(1, 1_000)
    }

    /// A cluster, started again (on other ports) when a start fails: a
    /// node can lose its port to another test between being found free
    /// and being bound, and `redis-cli --cluster create` then waits for it
    /// for ever, so it is given 15 s.
    fn start_with(replicas: usize, node_timeout_ms: u32) -> Self {
        for _ in 0..3 {
            if let Some(cluster) = Self::try_start(replicas, node_timeout_ms) {
                return cluster;
            }
        }
        panic!("a Redis Cluster did not start in three attempts");
    }

    fn try_start(replicas: usize, node_timeout_ms: u32) -> Option<Self> {
        let timeout = node_timeout_ms.to_string();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|i| Self::node(i, &timeout))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut create = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli --cluster create");
        let deadline = Instant::now() + Duration::from_secs(15);
        let created = loop {
            match create.try_wait() {
                Ok(Some(status)) => break status.success(),
                Ok(None) if Instant::now() < deadline => sleep(Duration::from_millis(50)),
                _ => {
                    let _ = create.kill();
                    let _ = create.wait();
                    break false;
                }
            }
        };
        if !created {
            return None;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let in_sync = |n: &RedisServer| {
            let replication = n.cli(&["INFO", "replication"]);
            !replication.contains("role:slave") || replication.contains("master_link_status:up")
        };
        while !nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") && in_sync(n))
        {
            if Instant::now() >= deadline {
                return None;
            }
            sleep(Duration::from_millis(50));
        }
        Some(Self { nodes })
    }

    /// The `i`th node of a cluster, started, not yet part of it.
    fn node(i: usize, node_timeout_ms: &str) -> RedisServer {
        let conf = format!("nodes-{i}.conf");
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &conf,
            "--cluster-node-timeout",
            node_timeout_ms,
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
            // A primary down stops only its own slots, not the
            // whole cluster, while its replica takes over.
            "--cluster-require-full-coverage",
            "no",
        ];
        // The cluster bus listens on port + 10000, free too.
        loop {
            let port = cluster_port();
            if let Some(node) =
                RedisServer::try_spawn("redis-server", port, temp_dir("redis"), &args)
            {
                break node;
            }
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The first node's address, `host:port`, as `redis-cli --cluster`
    /// names a cluster.
    pub fn first(&self) -> String {
        format!("127.0.0.1:{}", self.nodes[0].port)
    }

    /// `redis-cli --cluster <args>`, to its end (moving slots and their
    /// keys live); panics when it fails.
    pub fn manage(&self, args: &[&str]) {
        assert!(self.try_manage(args), "redis-cli --cluster {args:?} failed");
    }

    /// [`manage`](Self::manage), saying whether it succeeded.
    pub fn try_manage(&self, args: &[&str]) -> bool {
        Command::new("redis-cli")
            .arg("--cluster")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The id of node `i`.
    pub fn id(&self, i: usize) -> String {
        self.nodes[i].cli(&["CLUSTER", "MYID"]).trim().to_owned()
    }

    /// A fourth primary, empty, joined to the cluster (no slots yet: a
    /// rebalance gives it some).
    pub fn add_primary(&mut self) {
        let node = Self::node(self.nodes.len(), "5000");
        let new = format!("127.0.0.1:{}", node.port);
        self.manage(&["add-node", &new, &self.first()]);
        self.nodes.push(node);
        // Every node must agree on it before slots can move to it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.try_manage(&["check", &self.first()]) {
            assert!(
                Instant::now() < deadline,
                "the nodes did not agree on the new one"
            );
            sleep(Duration::from_millis(100));
        }
    }
}
