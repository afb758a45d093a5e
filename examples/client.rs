//! A client that waits for its turn: `n` requests through
//! [`ThrottleLayer`], which paces them by the server's quota headers (and
//! its `Retry-After`, should one come), so that it is not refused.
//!
//! ```sh
//! cargo run --example server &
//! cargo run --example client -- --url http://127.0.0.1:3000/api/burst --requests 30 --user alice
//! ```
//!
//! It prints each status, then, last: `sent <n>, 429s <m>, elapsed <seconds>s`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_ratelimit::client::ThrottleLayer;

/// What a run did.
#[derive(Debug)]
pub struct Summary {
    pub sent: usize,
    pub refused: usize,
    pub elapsed: Duration,
    pub statuses: Vec<u16>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sent {}, 429s {}, elapsed {:.2}s",
            self.sent,
            self.refused,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Send `requests` GETs of `url` as `user` (`x-user-id`), one after another.
pub async fn run(
    url: &str,
    requests: usize,
    user: &str,
) -> Result<Summary, Box<dyn std::error::Error>> {
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut client = ServiceBuilder::new()
        .layer(ThrottleLayer::new().max_wait(Duration::from_secs(120)))
        .service(http);
    let started = Instant::now();
    let mut statuses = Vec::with_capacity(requests);
    for _ in 0..requests {
        let req = http::Request::get(url)
            .header("x-user-id", user)
            .body(Empty::new())?;
        let res = client.ready().await?.call(req).await?;
        statuses.push(res.status().as_u16());
        res.into_body().collect().await?;
    }
    Ok(Summary {
        sent: requests,
        refused: statuses.iter().filter(|s| **s == 429).count(),
        elapsed: started.elapsed(),
        statuses,
    })
}

#[allow(dead_code)] // tests include this file for `run`
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut url, mut requests, mut user) = (None, 10, String::from("anonymous"));
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => url = Some(value),
            "--requests" => requests = value.parse().map_err(|e| format!("--requests: {e}"))?,
            "--user" => user = value,
            other => {
                return Err(
                    format!("unknown flag {other} (expected --url, --requests, --user)").into(),
                )
            }
        }
    }
    let url = url.ok_or("--url is required")?;
    let summary = run(&url, requests, &user).await?;
    for (i, status) in summary.statuses.iter().enumerate() {
        println!("request {:>4}: {status}", i + 1);
    }
    println!("{summary}");
    Ok(())
}
