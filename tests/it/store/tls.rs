//! `rediss://` against a real `redis-server` serving TLS with certificates
//! the test makes: verified by a CA the user names, refused when the
//! certificate does not verify (never a silent connection), and mutual TLS.
#![cfg(feature = "redis-tls")]

use std::time::{Duration, Instant};

use crate::support::tls::Certificates;
use crate::support::{RedisServer, AGREE};
use tower_ratelimit::backend::{Backend, RedisBackend, RedisBackendBuilder};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// A server with a plain port (for the test's own `redis-cli`) and a TLS
/// port; `clients`: whether a client certificate is required (`yes`/`no`).
fn tls_server(certs: &Certificates, clients: &str) -> (RedisServer, String) {
    let port = RedisServer::unused_port();
    let args = certs.server_args(port, clients);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = RedisServer::start_with("redis-server", &args);
    (server, format!("rediss://127.0.0.1:{port}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn admitted(rt: &tokio::runtime::Runtime, redis: &RedisBackend, user: &str) -> Vec<usize> {
    Algorithm::ALL
        .into_iter()
        .map(|algorithm| {
            let policy = Policy::single(algorithm, Quota::per_minute(5).unwrap()).unwrap();
            let key = Key::new("user", format!("{user}-{algorithm}"));
            (0..8)
                .filter(|_| {
                    rt.block_on(redis.check(&key, &policy, 1))
                        .unwrap()
                        .is_allowed()
                })
                .count()
        })
        .collect()
}

#[test]
fn a_server_verified_by_a_named_authority_decides_exactly() {
    let certs = Certificates::generate("named");
    let (_server, url) = tls_server(&certs, "no");
    let rt = runtime();
    let redis = rt
        .block_on(
            RedisBackend::builder(&url)
                .tls_root_certificates(certs.read("ca.crt"))
                .timeout(AGREE)
                .connect(),
        )
        .unwrap();
    assert_eq!(admitted(&rt, &redis, "tls"), [5; 6]);
}

#[test]
fn a_certificate_that_does_not_verify_never_connects_silently() {
    let certs = Certificates::generate("refused");
    let (_server, url) = tls_server(&certs, "no");
    let rt = runtime();
    let refused = |builder: RedisBackendBuilder| {
        let err = rt.block_on(builder.connect()).unwrap_err();
        assert_eq!(err.cause(), tower_ratelimit::backend::Cause::Tls, "{err}");
        assert!(err.to_string().contains("certificate"), "{err}");
    };
    // The system's roots know nothing of the test's CA; nor does another CA.
    refused(RedisBackend::builder(&url));
    refused(RedisBackend::builder(&url).tls_root_certificates(certs.read("other-ca.crt")));

    // Connected lazily: every decision fails, saying why, at once.
    let lazy = {
        let _runtime = rt.enter();
        RedisBackend::builder(&url)
            .tls_root_certificates(certs.read("other-ca.crt"))
            .timeout(Duration::from_secs(2))
            .connect_lazy()
            .unwrap()
    };
    let policy: Policy = "5/min".parse().unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        let err = rt
            .block_on(lazy.check(&Key::new("user", "lazy"), &policy, 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("certificate"), "{err}");
        assert!(started.elapsed() < Duration::from_millis(500), "{err}");
    }
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let certs = Certificates::generate("mutual");
    let (_server, url) = tls_server(&certs, "yes");
    let rt = runtime();
    let builder = || RedisBackend::builder(&url).tls_root_certificates(certs.read("ca.crt"));
    assert!(rt.block_on(builder().connect()).is_err());
    let redis = rt
        .block_on(
            builder()
                .tls_client_certificate(certs.read("client.crt"), certs.read("client.key"))
                .connect(),
        )
        .unwrap();
    assert_eq!(admitted(&rt, &redis, "mutual"), [5; 6]);
}

/// The example server on `rediss://` with `REDIS_CA_FILE`: its limits are
/// kept in Redis over TLS.
#[tokio::test]
async fn the_example_server_keeps_its_limits_over_tls() {
    use crate::support::send;
    let certs = Certificates::generate("example");
    let (server, url) = tls_server(&certs, "no");
    let config = crate::server::Config {
        redis_ca_file: Some(certs.path("ca.crt").into()),
        // The first request makes the lazy connection, TLS handshake and
        // all: under a loaded test run that takes longer than 50 ms.
        store_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let app = crate::server::redis_app(&config, &url)
        .await
        .unwrap()
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut expected = vec![200; 10];
    expected.push(429);
    let mut seen = Vec::new();
    for _ in 0..11 {
        let (status, _, _) = send(
            addr,
            http::Method::GET,
            "/api/search",
            &[("x-user-id", "tls")],
            "",
        )
        .await;
        seen.push(status.as_u16());
    }
    assert_eq!(seen, expected);
    assert!(server.evalsha_calls() >= 11);
}

/// A Redis Cluster that speaks only TLS (clients, the cluster bus,
/// replication): `rediss+cluster://` with the CA named decides exactly,
/// and without it is refused.
#[cfg(feature = "redis-cluster")]
#[test]
fn a_cluster_over_tls() {
    use std::process::{Command, Stdio};
    let certs = Certificates::generate("cluster");
    let ports: Vec<u16> = (0..3)
        .map(|_| crate::support::redis::cluster_port())
        .collect();
    let dir = certs.dir.clone();
    let cli = |port: u16, args: &[&str]| {
        let out = Command::new("redis-cli")
            .args([
                "--tls",
                "--cacert",
                &certs.path("ca.crt"),
                "-p",
                &port.to_string(),
            ])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut nodes: Vec<_> = ports
        .iter()
        .map(|port| {
            Command::new("redis-server")
                .args([
                    "--port",
                    "0",
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(dir.join(format!("nodes-{port}.conf")))
                .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
                .args(certs.server_args(*port, "no"))
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server")
        })
        .collect();
    let kill = |nodes: &mut Vec<std::process::Child>| {
        for node in nodes.iter_mut() {
            let _ = node.kill();
            let _ = node.wait();
        }
    };
    let wait = |done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "the TLS cluster did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait(&|| ports.iter().all(|&p| cli(p, &["PING"]).trim() == "PONG"));
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .args([
            "--tls",
            "--cacert",
            &certs.path("ca.crt"),
            "--cluster",
            "create",
        ])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    if !created.status.success() {
        kill(&mut nodes);
        panic!("{}", String::from_utf8_lossy(&created.stdout));
    }
    wait(&|| {
        ports
            .iter()
            .all(|&p| cli(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    });

    let rt = runtime();
    let url = format!("rediss+cluster://{}", addrs.join(","));
    let refused = rt.block_on(RedisBackend::builder(&url).connect());
    let redis = rt.block_on(
        RedisBackend::builder(&url)
            .tls_root_certificates(certs.read("ca.crt"))
            .timeout(AGREE)
            .connect(),
    );
    let admitted = redis.as_ref().map(|redis| admitted(&rt, redis, "cluster"));
    kill(&mut nodes);
    assert!(refused.is_err(), "connected without the CA");
    assert_eq!(admitted.unwrap(), [5; 6]);
}

/// Sentinel over TLS (`rediss+sentinel://`): the sentinels, the master and
/// the replica all speak TLS; decisions follow the master through a
/// failover.
#[cfg(feature = "redis-sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_follows_the_master() {
    use crate::support::sentinel::Sentinels;
    let certs = std::sync::Arc::new(Certificates::generate("sentinel"));
    let mut setup = {
        let certs = std::sync::Arc::clone(&certs);
        tokio::task::spawn_blocking(move || Sentinels::start_tls(&certs))
            .await
            .unwrap()
    };
    let redis = RedisBackend::builder(&setup.tls_url())
        .tls_root_certificates(certs.read("ca.crt"))
        .timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let policy: Policy = "100/min".parse().unwrap();
    let key = Key::new("user", "sentinel-tls");
    for _ in 0..10 {
        assert!(redis.check(&key, &policy, 1).await.unwrap().is_allowed());
    }
    setup.primary.kill();
    let setup = setup.promotion().await;
    let promoted = Instant::now();
    loop {
        if redis.check(&key, &policy, 1).await.is_ok() {
            break;
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(2),
            "not on the new master"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(setup);
}

/// A fleet over mutual TLS with a CA of one's own: joined through a
/// configured builder, a change on one server runs on the other within a
/// second, a reset reaches both; without the CA it does not join.
#[cfg(feature = "config")]
#[tokio::test]
async fn a_fleet_over_tls_with_a_private_ca() {
    use std::sync::{Arc, Mutex};
    use tower_ratelimit::config::{Fleet, Limits, LimitsFile};
    let certs = Certificates::generate("fleet");
    let (_server, url) = tls_server(&certs, "yes");
    let builder = || {
        RedisBackend::builder(&url)
            .tls_root_certificates(certs.read("ca.crt"))
            .tls_client_certificate(certs.read("client.crt"), certs.read("client.key"))
            .timeout(AGREE)
    };
    let file = || LimitsFile::parse(crate::limits::fleet::FILE).unwrap();
    let refused = Fleet::join(
        RedisBackend::builder(&url),
        Fleet::DEFAULT_NAME,
        Limits::new(file()),
    );
    assert!(refused.await.is_err(), "joined without the CA");
    let mut servers = Vec::new();
    let told = Arc::new(Mutex::new(0));
    for _ in 0..2 {
        let limits = Limits::new(file());
        let fleet = Fleet::join(builder(), Fleet::DEFAULT_NAME, limits.clone())
            .await
            .unwrap();
        let told = told.clone();
        fleet.on_forget(move |_| *told.lock().unwrap() += 1);
        servers.push((limits, fleet));
    }
    servers[0]
        .1
        .change(|f| f.with_route_limits(None, "/api/search", "search = 23/min"))
        .await
        .unwrap();
    let took =
        crate::limits::fleet::until(|| servers[1].0.current().text().contains("23/min")).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    servers[1].1.forget(&Key::new("user", "ann")).await.unwrap();
    let took = crate::limits::fleet::until(|| *told.lock().unwrap() == 2).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
}
