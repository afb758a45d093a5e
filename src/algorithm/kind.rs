//! The six algorithms by name: what a [`Limit`](crate::Limit) is built with.

use std::fmt;
use std::str::FromStr;

/// The six algorithms, by name. Parses from and prints as `fixed-window`,
/// `sliding-log`, `sliding-window`, `token-bucket`, `leaky-bucket`, `gcra`.
///
/// ```
/// use tower_ratelimit::Algorithm;
/// assert_eq!("gcra".parse::<Algorithm>().unwrap(), Algorithm::Gcra);
/// assert_eq!(Algorithm::SlidingWindow.to_string(), "sliding-window");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Counts per aligned window; resets at each boundary.
    FixedWindow,
    /// Remembers each admitted request for one window: exact.
    SlidingLog,
    /// Current window's count plus the previous window's, weighted by overlap.
    #[default]
    SlidingWindow,
    /// Tokens refill at the rate up to the burst; each request takes some.
    TokenBucket,
    /// A meter that fills with each request and drains at the rate.
    LeakyBucket,
    /// Generic cell rate algorithm: one theoretical arrival time per key.
    Gcra,
}

impl Algorithm {
    /// All six, in the order of the documentation.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ];

    /// The name it parses from.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::SlidingWindow => "sliding-window",
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::LeakyBucket => "leaky-bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether a quota's burst means something to this algorithm.
    pub fn takes_burst(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

/// A name that is none of the six algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown algorithm {:?} (expected one of fixed-window, sliding-log, \
             sliding-window, token-bucket, leaky-bucket, gcra)",
            self.0
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}
