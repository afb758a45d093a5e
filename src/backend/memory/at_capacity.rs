//! [`AtCapacity`]: what a full backend does with a key it does not know.

/// What a full backend does with a key it does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtCapacity {
    /// Evict the nearby state that expires soonest (see the module docs).
    #[default]
    EvictSoonestExpiring,
    /// Deny requests from new keys until state expires.
    Deny,
}
