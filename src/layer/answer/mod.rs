//! What the middlewares send back, shared by all of them: the refusal
//! (`response.rs`), quota headers (`headers.rs`) from text rendered once per
//! policy (`rendered.rs`), the gRPC form of a refusal (`grpc.rs`), and the
//! response body (`body.rs`) that carries a permit of a limit of requests in
//! flight until it ends (`permit.rs`), in the kind a layer answers with
//! (`body_kind.rs`: its own, or axum's), and the mark on a refusal
//! (`refused_by_limit.rs`).

pub(crate) mod body;
pub(crate) mod body_kind;
pub(crate) mod grpc;
pub(crate) mod headers;
pub(crate) mod permit;
pub(crate) mod refused_by_limit;
pub(crate) mod rendered;
pub(crate) mod response;

pub use body::ResponseBody;
#[cfg(feature = "axum")]
pub use body_kind::AxumBody;
pub use body_kind::{BodyKind, OwnBody};
pub use headers::HeaderStyle;
pub use refused_by_limit::RefusedByLimit;
pub use response::{LimitedFn, LimitedResponse, Refused};
