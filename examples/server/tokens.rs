//! `GET /api/tokens?n=<k>`: 1000 tokens per minute per user; each request
//! reserves 100 and is charged the `x-tokens-used` it reports.

use std::collections::HashMap;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use tower_ratelimit::backend::Backend;
use tower_ratelimit::config::Limits;

use super::Common;

pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
    common: &Common<B>,
    limits: &Limits,
) -> MethodRouter<S> {
    let limiter = common
        .layer(limits.keys(), limits.policies())
        .cost(100)
        .settle(|res| res.number("x-tokens-used"));
    get(tokens).layer(limiter)
}

async fn tokens(Query(query): Query<HashMap<String, String>>) -> Response {
    match query
        .get("n")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| *n <= 10_000)
    {
        Some(n) => (
            [("x-tokens-used", n.to_string())],
            format!("used {n} tokens\n"),
        )
            .into_response(),
        None => (
            StatusCode::BAD_REQUEST,
            "n must be a number of tokens from 0 to 10000\n",
        )
            .into_response(),
    }
}
