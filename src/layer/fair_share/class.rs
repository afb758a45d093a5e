//! [`Class`]: who is refused first when the capacity is short.

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

    /// Its position in [`ALL`](Self::ALL).
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
