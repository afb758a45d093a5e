//! [`ContentBytes`]: a request checked at its declared length before its handler runs.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::body::{RequestBytes, ResponseBytes};
use super::future::{ContentBytesFuture, Pending, State};
use super::{capacity, Settings};
use crate::backend::Backend;
use crate::key::KeyExtractor;
use crate::key::RequestHead;
use crate::layer::answer::response::{self};
use crate::layer::callee::{self, Answer};

/// The service a [`ContentBytesLayer`](super::ContentBytesLayer) makes.
#[derive(Clone, Debug)]
pub struct ContentBytes<S, K, B> {
    pub(super) inner: S,
    pub(super) key: K,
    pub(super) settings: Arc<Settings<B>>,
}

impl<S, K, B, ReqB, ResB> Service<Request<ReqB>> for ContentBytes<S, K, B>
where
    S: Service<Request<RequestBytes<ReqB, B>>, Response = Response<ResB>> + Clone,
    K: KeyExtractor,
    B: Backend,
{
    type Response = Response<ResponseBytes<ResB, B>>;
    type Error = S::Error;
    type Future = ContentBytesFuture<S, ReqB, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let settings = &self.settings;
        let key = match self.key.extract(&RequestHead::from(&req)) {
            Ok(key) => key,
            Err(error) => {
                let response = response::key_error(StatusCode::BAD_REQUEST, &error);
                return ContentBytesFuture::respond(response);
            }
        };
        // Content-Length is a first reservation, never trusted alone: the
        // body is counted as it is read.
        let declared = if settings.requests {
            req.headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(0)
        } else {
            0
        };
        if declared > capacity(&settings.policy) {
            return ContentBytesFuture::respond(response::payload_too_large(&settings.policy));
        }
        // At most the capacity, so within u32.
        let reserved = declared as u32;
        let check = settings.backend.check(&key, &settings.policy, reserved);
        let state = match callee::answer::<B, S>(check, &mut self.inner) {
            Answer::Now(answer, inner) => Pending {
                inner,
                req,
                key,
                reserved,
                settings: settings.clone(),
            }
            .answered(answer),
            Answer::Later(check, inner) => State::Check {
                check,
                pending: Some(Pending {
                    inner,
                    req,
                    key,
                    reserved,
                    settings: settings.clone(),
                }),
            },
        };
        ContentBytesFuture { state }
    }
}
