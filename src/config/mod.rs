//! Limits from a file: routes, keys, tiers, per-key policies and lists in
//! one TOML document, validated before it runs, reloaded while it runs
//! (feature `config`).
//!
//! ```toml
//! algorithm = "sliding-window"     # of every limit without its own
//! on_store_failure = "allow"       # or "deny": while the store cannot decide
//! unmatched = "unlimited"          # or "refuse": requests no route matches
//!
//! [client_ip]
//! trusted_proxies = ["10.0.0.0/8"] # or trust_hops = 1; header, ipv6_prefix
//!
//! [keys]                           # ip, endpoint and global are built in
//! user = { header = "x-user-id", or = "ip" }
//! user-endpoint = { all = ["user", "endpoint"] }
//! api = { api_key = "x-api-key", secret_env = "API_KEY_SECRET" }
//!
//! [tiers]                          # policies by name
//! free = "key-free = 100/h"
//! pro = "key-pro = 1000/h"
//!
//! [tier_of]                        # which requests get which tier
//! header = "x-plan"                # its value names the tier (or: values = {...})
//! default = "free"                 # or extension = true: a Tier an auth layer set
//!
//! [[routes]]
//! path = "/api/search"             # the route template (axum's MatchedPath)
//! method = "GET"                   # any method when absent
//! key = "user-endpoint"            # default: ip
//! limits = "search = 10/min"       # the quota syntax: "burst = 10/s; 100/min"
//! penalty = { strikes = 10, within = "1min", ban = "5min", max_ban = "1h" }
//!
//! [[routes]]
//! path = "/api/key"
//! key = "api"
//! tiered = true
//!
//! [[routes]]
//! path = "/api/slow"
//! in_flight = { name = "slow", permits = 2 }
//!
//! [fallback]                       # every other request (optional)
//! limits = "1000/min"
//!
//! [[overrides]]                    # one client's own policy, on every route
//! key = "user"
//! value = "acme"
//! limits = "5000/min"
//!
//! [lists]
//! deny_networks = ["203.0.113.0/24"]
//! allow = [{ key = "user", value = "monitoring" }]
//! ```
//!
//! Routes also take `algorithm`, `shadow` and `count_denied`; the file takes
//! `shadow` (every policy) and `version` (a label; a hash of the text when
//! absent). A key not listed here is an error, as is every mistake in a
//! value: [`ConfigError`] names the file, the line and column, and what was
//! expected there.
//!
//! [`LimitsFile`] is one version of the file, parsed and built;
//! [`Limits`] runs one, gives the layer its keys, policies, lists and
//! per-key policies, and replaces it — by hand, when the file changes
//! ([`Limits::watch`]), or, on Redis, when any server of a fleet changes it
//! (`Fleet`, features `config` and `redis`). What a replacement does to
//! clients' state is [`Live`](crate::Live)'s rule: a named limit keeps its
//! clients' state through a change of its number; an anonymous one, or a
//! change of algorithm or window, starts afresh.
//!
//! ```
//! use tower_ratelimit::config::{Limits, LimitsFile};
//!
//! let file = LimitsFile::parse(r#"
//!     [keys]
//!     user = { header = "x-user-id", or = "ip" }
//!
//!     [[routes]]
//!     path = "/api/search"
//!     key = "user"
//!     limits = "search = 10/min"
//! "#)?;
//! let limits = Limits::new(file);
//! let app: axum::Router = axum::Router::new()
//!     .route("/api/search", axum::routing::get(|| async { "results" }))
//!     .layer(limits.layer());
//! # drop(app);
//! # Ok::<(), tower_ratelimit::config::ConfigError>(())
//! ```

mod compile;
mod defaults;
mod disk;
mod error;
mod file;
#[cfg(feature = "redis")]
mod fleet;
mod keys;
mod running;
mod schema;
mod watch;

pub use defaults::FileDefaults;
pub use error::ConfigError;
pub use file::{LimitsFile, List, ListEntry};
#[cfg(feature = "redis")]
pub use fleet::Fleet;
pub use keys::Tier;
pub use running::{FileKeys, FilePolicies, Limits};
pub use watch::Reload;
