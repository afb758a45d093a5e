//! `Observer`: the layer that shows `Adaptive` the service's responses.

use tower_layer::Layer;

use super::limits::Adaptive;
use super::service::Observed;

/// The layer that shows an [`Adaptive`] limit the guarded service's
/// responses ([`Adaptive::observer`]).
#[derive(Clone, Debug)]
pub struct Observer {
    pub(super) adaptive: Adaptive,
}

/// Built beside the layer it builds: `limits.rs` need not know it.
impl Adaptive {
    /// The layer that sees the guarded service's responses: put it inside
    /// the rate limiter.
    pub fn observer(&self) -> Observer {
        Observer {
            adaptive: self.clone(),
        }
    }
}

impl<S> Layer<S> for Observer {
    type Service = Observed<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Observed {
            inner,
            adaptive: self.adaptive.clone(),
        }
    }
}
