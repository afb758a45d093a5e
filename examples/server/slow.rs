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
use tower_ratelimit::config::Limits;

use super::Common;

/// Chunks of a slow body.
const CHUNKS: u64 = 10;

pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
    common: &Common<B>,
    limits: &Limits,
) -> MethodRouter<S> {
    get(slow).layer(common.layer(limits.keys(), limits.policies()))
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
