//! `FileDefaults`: what applies where a limits file says nothing.

use http::Method;
use ipnet::IpNet;

use crate::Algorithm;

/// What applies where a limits file says nothing: settings of the process
/// (its environment, its command line) that a file may override.
///
/// ```
/// use tower_ratelimit::config::FileDefaults;
/// use tower_ratelimit::Algorithm;
///
/// let file = FileDefaults::new()
///     .algorithm(Algorithm::Gcra)
///     .parse("[[routes]]\npath = \"/a\"\nlimits = \"a = 10/s\"\n")?;
/// # Ok::<(), tower_ratelimit::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct FileDefaults {
    pub(super) algorithm: Algorithm,
    pub(super) trusted_proxies: Vec<IpNet>,
    pub(super) required_routes: Vec<(Option<Method>, String)>,
}

impl FileDefaults {
    /// The crate's defaults: [`Algorithm::default`], no trusted proxy.
    pub fn new() -> Self {
        Self::default()
    }

    /// The algorithm of every limit, unless the file or its route names one.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The proxies whose forwarded addresses are believed, unless the
    /// file's `[client_ip]` names its own.
    pub fn trusted_proxies(mut self, networks: impl IntoIterator<Item = IpNet>) -> Self {
        self.trusted_proxies = networks.into_iter().collect();
        self
    }

    /// Refuse a file that does not limit `method` requests to `path` (any
    /// method's route counts; `None`: a route for every method): a route
    /// the application serves and must not leave unlimited. The rule holds
    /// for every version of the file read with these defaults — at
    /// start-up, on reload ([`Limits::watch`](super::Limits::watch)), from a fleet — so a file cut
    /// short or emptied by mistake is refused and the running version stays.
    ///
    /// ```
    /// use tower_ratelimit::config::FileDefaults;
    ///
    /// let defaults = FileDefaults::new().require_route(Some(http::Method::POST), "/api/login");
    /// let error = defaults.parse("[[routes]]\npath = \"/a\"\nlimits = \"10/s\"\n").unwrap_err();
    /// assert!(error.message().contains("POST /api/login"), "{error}");
    /// ```
    pub fn require_route(mut self, method: Option<Method>, path: impl Into<String>) -> Self {
        self.required_routes.push((method, path.into()));
        self
    }
}
