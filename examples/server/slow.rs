//! `GET /api/slow?ms=<n>`: a body streamed over n ms (n ≤ 10000); at most 2
//! in flight per user, each holding its permit until its body is sent.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use tower_ratelimit::backend::Backend;
use tower_ratelimit::key::{Header, KeyExtractor};
use tower_ratelimit::policy::PolicyError;
use tower_ratelimit::{Limit, Live, Policy};

use super::routes::client_ip;
use super::{Common, Config};

/// Chunks of a slow body.
const CHUNKS: u64 = 10;

pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
    config: &Config,
    common: &Common<B>,
    in_flight: Live<Policy>,
) -> MethodRouter<S> {
    let user = Header::new("x-user-id").or(client_ip(config));
    get(slow).layer(common.layer(user, in_flight))
}

/// At most `permits` requests in flight per user, each permit leased for
/// 15 s and renewed every 7.5 s while a body streams.
pub(super) fn in_flight(permits: u32) -> Result<Policy, PolicyError> {
    Limit::concurrent("slow", permits)
        .and_then(|l| l.lease(Duration::from_secs(15)))
        .and_then(|limit| Policy::builder().with(limit).build())
}

async fn slow(Query(query): Query<HashMap<String, String>>) -> Response {
    let Some(ms) = query
        .get("ms")
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| *n <= 10_000)
    else {
        return (StatusCode::BAD_REQUEST, "ms must be from 0 to 10000\n").into_response();
    };
    let pause = Duration::from_millis(ms / CHUNKS);
    let chunks = futures_util::stream::unfold(0, move |i| async move {
        if i == CHUNKS {
            return None;
        }
        tokio::time::sleep(pause).await;
        Some((
            Ok::<_, Infallible>(Bytes::from(format!("chunk {i}\n"))),
            i + 1,
        ))
    });
    Body::from_stream(chunks).into_response()
}
