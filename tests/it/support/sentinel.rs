//! Redis Sentinel set up by a test: a primary, a replica and three
//! sentinels watching them (quorum 2, a primary is down after 1 s), each a
//! process of the test's own, killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::redis::RedisServer;

pub const MASTER: &str = "mymaster";

pub struct Sentinels {
    pub primary: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(Child, u16)>,
    dir: PathBuf,
}

impl Sentinels {
    /// Start them all, and wait until the replica is in sync and every
    /// sentinel knows the replica and the two other sentinels (so that a
    /// failover can be agreed).
    pub fn start() -> Self {
        let sync = [
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ];
        let primary = RedisServer::start_with("redis-server", &sync);
        let replica_of = format!("127.0.0.1 {}", primary.port);
        let mut args = sync.to_vec();
        args.extend(["--replicaof", &replica_of]);
        let replica = RedisServer::start_with("redis-server", &args);
        let dir = std::env::temp_dir().join(format!(
            "tower-ratelimit-sentinel-{}-{}",
            std::process::id(),
            RedisServer::unused_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let sentinels = (0..3)
            .map(|i| {
                let port = RedisServer::unused_port();
                let conf = dir.join(format!("sentinel-{i}.conf"));
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor {MASTER} 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds {MASTER} 1000\n\
                         sentinel failover-timeout {MASTER} 5000\n\
                         sentinel parallel-syncs {MASTER} 1\n",
                        dir.display(),
                        primary.port
                    ),
                )
                .unwrap();
                let child = Command::new("redis-server")
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server --sentinel");
                (child, port)
            })
            .collect();
        let setup = Self {
            primary,
            replica,
            sentinels,
            dir,
        };
        setup.wait_until(Duration::from_secs(20), |s| {
            s.replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
                && s.sentinel_ports().iter().all(|&port| {
                    let replicas = cli(port, &["SENTINEL", "REPLICAS", MASTER]);
                    let others = cli(port, &["SENTINEL", "SENTINELS", MASTER]);
                    replicas.contains(&s.replica.port.to_string())
                        && others.matches("127.0.0.1").count() >= 2
                })
        });
        setup
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(_, port)| *port).collect()
    }

    /// `redis+sentinel://…/mymaster` for these sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinel_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// Whether the replica has been promoted.
    pub fn replica_is_master(&self) -> bool {
        self.replica.cli(&["ROLE"]).starts_with("master")
    }

    /// Wait (blocking) until `done`, at most `limit`.
    pub fn wait_until(&self, limit: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "sentinel setup: not ready in {limit:?}"
            );
            sleep(Duration::from_millis(50));
        }
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (child, _) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
