//! `GET /api/tokens?n=<k>`: 1000 tokens per minute per user; each request
//! reserves 100 and is charged the `x-tokens-used` it reports.

use std::collections::HashMap;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use tower_ratelimit::backend::Backend;
use tower_ratelimit::key::{Header, KeyExtractor};
use tower_ratelimit::{Live, Policy};

use super::routes::client_ip;
use super::{Common, Config};

pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
    config: &Config,
    common: &Common<B>,
    policy: Live<Policy>,
) -> MethodRouter<S> {
    let user = Header::new("x-user-id").or(client_ip(config));
    let limiter = common
        .layer(user, policy)
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
