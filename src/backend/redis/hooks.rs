//! Hooks for the conformance suite and the benchmarks, hidden from the
//! docs: decisions at a time the test chooses, and the script and command
//! one decision sends, for measuring them with other tools.

use super::script::{invocation, Ask, KeyFormat, Shape};
use super::RedisBackend;
use crate::backend::BackendError;
use crate::key::Key;
use crate::{clock::Micros, Decision, Policy};

impl RedisBackend {
    /// Decide as [`Backend::check`] does, at `now` (since the Unix epoch)
    /// instead of Redis's clock: for replaying a trace; production decisions
    /// use the server's `TIME`.
    ///
    /// Not part of the public API (hidden from the docs): the conformance
    /// suite's hook, deciding at a time the test chooses.
    #[doc(hidden)]
    pub async fn check_at(
        &self,
        key: &Key,
        policy: &Policy,
        cost: u32,
        now: Micros,
    ) -> Result<Decision, BackendError> {
        self.decide(key, policy, Ask::Check(cost), Some(now)).await
    }

    /// Settle as [`Backend::settle`] does, at `now` (see
    /// [`check_at`](Self::check_at)).
    ///
    /// Not part of the public API (hidden from the docs): the conformance
    /// suite's hook, deciding at a time the test chooses.
    #[doc(hidden)]
    pub async fn settle_at(
        &self,
        key: &Key,
        policy: &Policy,
        reserved: u32,
        actual: u32,
        now: Micros,
    ) -> Result<Decision, BackendError> {
        let ask = Ask::Settle { reserved, actual };
        self.decide(key, policy, ask, Some(now)).await
    }

    /// Release (`renew`: false) or renew a permit as [`Backend::release`]
    /// and [`Backend::renew`] do, at `now` (see [`check_at`](Self::check_at)).
    ///
    /// Not part of the public API (hidden from the docs): the conformance
    /// suite's hook, deciding at a time the test chooses.
    #[doc(hidden)]
    pub async fn permit_at(
        &self,
        key: &Key,
        policy: &Policy,
        permit: Micros,
        cost: u32,
        renew: bool,
        now: Micros,
    ) -> Result<Decision, BackendError> {
        let ask = if renew {
            Ask::Renew { permit, cost }
        } else {
            Ask::Release { permit, cost }
        };
        self.decide(key, policy, ask, Some(now)).await
    }

    /// Take a lease as a leasing backend does, at `now` (see
    /// [`check_at`](Self::check_at)): give `back` units back, then decide a
    /// request of `cost` taking `want` units, or only `cost` when `want`
    /// does not fit. The decision, and the units taken. For the conformance
    /// tests; leases are taken by [`leased`](RedisBackendBuilder::leased).
    #[doc(hidden)]
    pub async fn lease_at(
        &self,
        key: &Key,
        policy: &Policy,
        cost: u32,
        want: u32,
        back: u32,
        now: Micros,
    ) -> Result<(Decision, u64), BackendError> {
        let ask = Ask::Lease { cost, want, back };
        self.call(key, policy, ask, Some(now)).await
    }

    /// The script one decision runs in `format` (the one
    /// [`evalsha_command`](Self::evalsha_command) calls), as text: for
    /// measuring it with other tools.
    #[doc(hidden)]
    pub fn script_source(format: KeyFormat, policy: &Policy, cost: u32) -> String {
        Shape::of(policy, Ask::Check(cost), format).source()
    }

    /// The script a batch of such decisions runs (`batch.lua` or
    /// `lean_batch.lua` around the one decision's driver), as text: for
    /// measuring it with other tools.
    #[doc(hidden)]
    pub fn batch_script_source(format: KeyFormat, policy: &Policy, cost: u32) -> String {
        Shape::of(policy, Ask::Check(cost), format).batch_source()
    }

    /// The `EVALSHA` command one decision sends, word by word: for
    /// benchmarking the script with other tools (`redis-benchmark`).
    #[doc(hidden)]
    pub fn evalsha_command(&self, key: &Key, policy: &Policy, cost: u32) -> Vec<String> {
        let (ask, shape) = (
            Ask::Check(cost),
            Shape::of(policy, Ask::Check(cost), self.link.names.format),
        );
        let mut command = vec![
            "EVALSHA".to_owned(),
            self.link.script(shape).get_hash().to_owned(),
        ];
        invocation(
            &self.link.names,
            key,
            policy,
            (ask, shape),
            None,
            &mut command,
        );
        command
    }
}
