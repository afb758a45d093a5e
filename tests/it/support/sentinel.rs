//! Redis Sentinel set up by a test: a primary, a replica and three
//! sentinels watching them (quorum 2, a primary is down after 1 s), each a
//! process of the test's own, killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::redis::RedisServer;
use super::tls::Certificates;

pub const MASTER: &str = "mymaster";

/// How long the sentinels may take to agree (on their set-up, or on a
/// failover): an election can split and be held again after the failover
/// timeout, twice on a busy machine. An event waited for, not a speed.
pub const SETTLE_WITHIN: Duration = Duration::from_secs(60);

pub struct Sentinels {
    pub primary: RedisServer,
    pub replica: RedisServer,
    /// Each sentinel, its port, and its TLS port if it has one.
    sentinels: Vec<(Child, u16, Option<u16>)>,
    dir: PathBuf,
}

impl Sentinels {
    /// Start them all, and wait until the replica is in sync and every
    /// sentinel knows the replica and the two other sentinels (so that a
    /// failover can be agreed).
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// The same, every server and sentinel also on a TLS port with `certs`
    /// (replication and the sentinels' own connections over TLS too).
    pub fn start_tls(certs: &Certificates) -> Self {
        Self::start_with(Some(certs))
    }

    fn start_with(tls: Option<&Certificates>) -> Self {
        let mut sync: Vec<String> = [
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ]
        .map(String::from)
        .to_vec();
        // A server's TLS port, and the arguments that open it.
        let tls_port = |certs: &Certificates| {
            let port = RedisServer::unused_port();
            let mut args = certs.server_args(port, "no");
            args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
            (port, args)
        };
        let (primary_tls, primary_args) = match tls {
            Some(certs) => {
                let (port, args) = tls_port(certs);
                (Some(port), [sync.clone(), args].concat())
            }
            None => (None, sync.clone()),
        };
        let primary = RedisServer::start_with("redis-server", &strs(&primary_args));
        let watched = primary_tls.unwrap_or(primary.port);
        sync.extend(["--replicaof".to_owned(), format!("127.0.0.1 {watched}")]);
        if let Some(certs) = tls {
            sync.extend(tls_port(certs).1);
        }
        let replica = RedisServer::start_with("redis-server", &strs(&sync));
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
                let mut text = format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {watched} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 5000\n\
                     sentinel parallel-syncs {MASTER} 1\n",
                    dir.display(),
                );
                let tls_port = tls.map(|certs| {
                    let tls_port = RedisServer::unused_port();
                    text.push_str(&format!(
                        "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\n\
                         tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n",
                        certs.path("server.crt"),
                        certs.path("server.key"),
                        certs.path("ca.crt"),
                    ));
                    tls_port
                });
                std::fs::write(&conf, text).unwrap();
                let child = Command::new("redis-server")
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server --sentinel");
                (child, port, tls_port)
            })
            .collect();
        let setup = Self {
            primary,
            replica,
            sentinels,
            dir,
        };
        setup.wait_until(SETTLE_WITHIN, |s| {
            s.replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
                && s.sentinel_ports().iter().all(|&port| {
                    let replicas = cli(port, &["SENTINEL", "REPLICAS", MASTER]);
                    let others = cli(port, &["SENTINEL", "SENTINELS", MASTER]);
                    replicas.contains("127.0.0.1") && others.matches("127.0.0.1").count() >= 2
                })
        });
        setup
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(_, port, _)| *port).collect()
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

    /// `rediss+sentinel://…/mymaster` for these sentinels' TLS ports.
    pub fn tls_url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .filter_map(|(_, _, tls)| Some(format!("127.0.0.1:{}", (*tls)?)))
            .collect();
        format!("rediss+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// Whether the replica has been promoted.
    pub fn replica_is_master(&self) -> bool {
        self.replica.cli(&["ROLE"]).starts_with("master")
    }

    /// Wait, on a blocking thread, until the replica has been promoted.
    pub async fn promotion(self) -> Self {
        tokio::task::spawn_blocking(move || {
            self.wait_until(SETTLE_WITHIN, Self::replica_is_master);
            self
        })
        .await
        .unwrap()
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
        for (child, _, _) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}
