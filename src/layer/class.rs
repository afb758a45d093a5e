//! [`Class`]: who is refused first when a capacity is short
//! ([`FairShare`](super::fair_share::FairShare),
//! [`AdaptiveConcurrency`](super::concurrency::AdaptiveConcurrency), and
//! an [`Adaptive`](super::Adaptive) limit below its whole).

/// A request's class: when the shared capacity is short, sheddable
/// requests are refused first, then default ones; critical requests keep a
/// reserve of the capacity and may use all of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Class {
    /// Served first: the reserve is theirs.
    Critical,
    /// Everything not marked otherwise.
    #[default]
    Default,
    /// Refused first (prefetches, batch jobs, retries).
    Sheddable,
}

impl Class {
    /// Every class, most important first.
    pub const ALL: [Class; 3] = [Class::Critical, Class::Default, Class::Sheddable];

    /// Its name, as a header carries it and metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Critical => "critical",
            Class::Default => "default",
            Class::Sheddable => "sheddable",
        }
    }

    /// The class a header value names (`critical`, `default`, `sheddable`,
    /// in any case); anything else is `Default`, so a client cannot make
    /// itself more than critical by sending something odd.
    pub fn from_header(value: &[u8]) -> Class {
        Class::ALL
            .into_iter()
            .find(|class| value.eq_ignore_ascii_case(class.as_str().as_bytes()))
            .unwrap_or_default()
    }

    /// A request's class from its header `name` (by
    /// [`from_header`](Self::from_header); none: default), for
    /// `classes(Class::by_header("x-priority"), …)`. Only where the header
    /// is set by something you trust, or where any client may ask for
    /// `critical`.
    pub fn by_header(
        name: &'static str,
    ) -> impl Fn(&crate::key::RequestHead<'_>) -> Class + Clone + Send + Sync + 'static {
        move |req| {
            req.headers
                .get(name)
                .map_or(Class::Default, |v| Class::from_header(v.as_bytes()))
        }
    }

    /// Its position in [`ALL`](Self::ALL).
    #[cfg_attr(
        not(any(feature = "adaptive", feature = "fair-share")),
        allow(dead_code)
    )]
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The parts of a capacity (in percent) that less important classes leave
/// to more important ones: `critical`, which default and sheddable
/// requests leave to critical ones, and `default`, which sheddable ones
/// leave to default ones too. So a class may fill 100% (critical),
/// `100 − critical` (default) or `100 − critical − default` (sheddable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserves {
    critical: u8,
    default: u8,
}

impl Reserves {
    /// 20% for critical requests, 10% more for default ones.
    pub const STANDARD: Reserves = Reserves {
        critical: 20,
        default: 10,
    };

    /// The reserves, together at most 90% (sheddable requests keep a
    /// tenth).
    pub fn new(critical: u8, default: u8) -> Result<Self, ReservesError> {
        let total = u16::from(critical) + u16::from(default);
        if total > 90 {
            return Err(ReservesError(format!(
                "the reserves take {total}% of the capacity: at most 90%, so that sheddable requests keep some"
            )));
        }
        Ok(Self { critical, default })
    }

    /// The percent of the capacity `class` may fill.
    pub fn fill(self, class: Class) -> u8 {
        match class {
            Class::Critical => 100,
            Class::Default => 100 - self.critical,
            Class::Sheddable => 100 - self.critical - self.default,
        }
    }
}

impl Default for Reserves {
    fn default() -> Self {
        Self::STANDARD
    }
}

/// Reserves that leave sheddable requests nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservesError(String);

impl std::fmt::Display for ReservesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReservesError {}
