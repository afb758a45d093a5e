//! "100 requests per minute per user, across a cluster of 10 API servers":
//! ten copies of the example server, each with its own Redis connection, and
//! 64 clients sending one user's requests to `/api/user` (100/min per user)
//! on all ten at once. The count admitted must be exactly what the algorithm
//! allows — never one more.
#![cfg(feature = "redis")]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::RedisServer;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::Algorithm;

const SERVERS: usize = 10;
const CLIENTS: usize = 64;
const PER_CLIENT: usize = 5;
const LIMIT: u32 = 100;

/// A decision's time limit here: ten servers, a cluster and 64 clients share
/// two cores with the rest of the suite, and a decision that times out would
/// be a 503, not a measurement.
const GENEROUS: Duration = Duration::from_secs(2);

/// Ten example servers on one Redis (or cluster), each connected on its own.
async fn api_servers(
    connect: impl Fn() -> tokio::task::JoinHandle<RedisBackend>,
    algorithm: Algorithm,
) -> Vec<SocketAddr> {
    // Exactness is the question here, not latency: a decision that fails
    // must show (a 503, which `hammer` rejects), never pass unlimited.
    let config = crate::server::Config {
        algorithm,
        on_store_failure: crate::server::StoreFailure::Closed,
        ..Default::default()
    };
    let mut addrs = Vec::new();
    for _ in 0..SERVERS {
        let app = crate::server::app(&config, connect().await.unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    }
    addrs
}

/// Wait until at least `margin` is left in the current minute (Redis's clock).
async fn within_one_minute(server: &RedisServer, margin: Duration) {
    let into_minute = server.time_micros() % 60_000_000;
    let left = 60_000_000 - into_minute;
    if left < margin.as_micros() as u64 {
        tokio::time::sleep(Duration::from_micros(left + 100_000)).await;
    }
}

/// 64 clients, each sending its requests round-robin over the servers, all
/// at once, for one user — `PER_CLIENT` each, or for `keep_going` if given;
/// returns how many got a 200.
async fn hammer(addrs: &[SocketAddr], user: &str, keep_going: Option<Duration>) -> usize {
    let until = keep_going.map(|d| tokio::time::Instant::now() + d);
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let (addrs, admitted, user) = (addrs.to_vec(), admitted.clone(), user.to_owned());
        tasks.spawn(async move {
            for i in 0.. {
                let more = match until {
                    Some(until) => tokio::time::Instant::now() < until,
                    None => i < PER_CLIENT,
                };
                if !more {
                    break;
                }
                let addr = addrs[(client + i) % addrs.len()];
                let stream = TcpStream::connect(addr).await.unwrap();
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(conn);
                let req = Request::get("/api/user")
                    .header("host", addr.to_string())
                    .header("x-user-id", &user)
                    .body(Empty::<bytes::Bytes>::new())
                    .unwrap();
                let res = sender.send_request(req).await.unwrap();
                let status = res.status();
                res.into_body().collect().await.unwrap();
                assert!(status == 200 || status == 429, "{status}");
                if status == 200 {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    tasks.join_all().await;
    admitted.load(Ordering::SeqCst)
}

/// Run every algorithm against ten servers on `connect`, checking exact counts.
async fn exact_across_ten_servers(
    clock: &RedisServer,
    connect: impl Fn() -> tokio::task::JoinHandle<RedisBackend> + Clone,
) {
    for algorithm in Algorithm::ALL {
        let addrs = api_servers(connect.clone(), algorithm).await;
        within_one_minute(clock, Duration::from_secs(15)).await;
        let user = format!("user-{algorithm}");
        // Buckets refill as they go: keep sending for a few refills.
        let keep_going = algorithm
            .takes_burst()
            .then_some(Duration::from_millis(2_500));
        let before = clock.time_micros();
        let admitted = hammer(&addrs, &user, keep_going).await;
        let after = clock.time_micros();
        match algorithm {
            // One window (the test fits in one minute): the limit, exactly.
            Algorithm::SlidingLog | Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                assert_eq!(admitted, LIMIT as usize, "{algorithm}");
            }
            // The bucket starts full (100) and refills one per 600 ms; with
            // 64 clients sending all the while, every token is taken within
            // moments, save perhaps the last one or two.
            _ => {
                let refilled = ((after - before) / 600_000) as usize;
                let most = LIMIT as usize + refilled;
                assert!(refilled >= 3, "the test ran long enough to refill");
                assert!(
                    (most - 2..=most).contains(&admitted),
                    "{algorithm}: {admitted} admitted, {most} allowed"
                );
            }
        }
        eprintln!(
            "{algorithm}: {admitted} admitted in {} ms",
            (after - before) / 1000
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_across_ten_servers_on_one_redis() {
    let server = RedisServer::start();
    let url = server.url();
    exact_across_ten_servers(&server, move || {
        let url = url.clone();
        tokio::spawn(async move {
            RedisBackend::builder(&url)
                .timeout(GENEROUS)
                .connect()
                .await
                .unwrap()
        })
    })
    .await;
}

/// On a cluster, in the packed key format (the compact one runs above and
/// on clusters in `faults.rs` and `leases.rs`): a client's fields and its
/// sliding log's own keys share its shard's slot.
#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_across_ten_servers_on_a_redis_cluster() {
    let cluster = crate::support::RedisCluster::start();
    let urls = cluster.urls();
    exact_across_ten_servers(&cluster.nodes[0], move || {
        let urls = urls.clone();
        tokio::spawn(async move {
            RedisBackend::cluster_builder(urls)
                .key_format(tower_ratelimit::backend::KeyFormat::PACKED)
                .timeout(GENEROUS)
                .connect()
                .await
                .unwrap()
        })
    })
    .await;
}
