//! The part of a request that limiting may depend on: everything but the body.

use http::{Extensions, HeaderMap, Method, Request, Uri};

/// A borrowed view of a request's head, handed to key extractors, policy
/// resolvers and cost functions. It is not generic over the body, so plain
/// closures can read it.
///
/// ```
/// use tower_ratelimit::key::RequestHead;
///
/// let req = http::Request::get("/search?q=x").header("x-user-id", "42").body(()).unwrap();
/// let head = RequestHead::from(&req);
/// assert_eq!(head.uri.path(), "/search");
/// assert_eq!(head.headers["x-user-id"], "42");
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RequestHead<'a> {
    /// The request method.
    pub method: &'a Method,
    /// The request target.
    pub uri: &'a Uri,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// Extensions: the peer address, a matched route, an auth layer's verdict.
    pub extensions: &'a Extensions,
}

impl<'a, B> From<&'a Request<B>> for RequestHead<'a> {
    fn from(req: &'a Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }
}
