//! Leased budgets: a server takes a share of a key's budget from Redis in
//! one call and spends it locally, so Redis sees one call per lease instead
//! of one per request (`RedisBackendBuilder::leased`).
//!
//! The rules, which bound what leasing can cost in accuracy:
//! - A share is `max(1, capacity / (30 × servers))` units of every limit of
//!   the policy (the smallest among them), taken all or nothing; when a
//!   whole share no longer fits, only the request's own cost is taken,
//!   exactly as without leases.
//! - A server holds one lease per key and policy. Below half a share it is
//!   topped up with another share in the background (the request that finds
//!   it so is answered at once), while the rest is still spent; a request
//!   that finds it empty while the next is being taken waits for that one
//!   (at most the backend's timeout). A failed top-up is not tried again
//!   before the lease ends. So a server holds under 1.5
//!   shares, and all servers together under 5% of each limit.
//! - A lease ends after 1% of the shortest window (between 10 ms and 1 s),
//!   and with the current window of a fixed-window limit. What it did not
//!   spend is given back by the call that takes the next one, unless that
//!   window has ended (the units lapse with it).
//!
//! So the units counted in Redis but not yet spent are under 5% of each
//! limit: the most leasing can strand (a client refused while other servers
//! hold unspent units). Under fixed windows nothing is ever admitted beyond
//! the limit: each unit is spent in the window that counted it. Under the
//! other algorithms, units counted when leased and spent up to a term later,
//! or given back, shift by at most those units.
//!
//! Policies that must see each request are never leased: a penalty box
//! (each denial is a strike), limits of requests in flight (each admission
//! is a permit), and counting denied requests.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::future::Future;

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

use super::script::Ask;
use super::RedisBackend;
use crate::algorithm::{FixedRule, Form};
use crate::backend::BackendError;
use crate::key::Key;
use crate::{clock::Micros, decision::Origin, Decision, Policy};

/// A decision on its way, as the backend's future.
type Deciding = Pin<Box<dyn Future<Output = Result<Decision, BackendError>> + Send>>;

const SHARDS: usize = 16;
/// Leases held at most (each about 100 bytes); past it, keys are decided
/// per request until ended leases are swept.
const MAX_LEASES: usize = 100_000;

/// The lease flow of a check: spend from the lease, top it up in the
/// background, take the next share, or ask Redis alone; what Redis is
/// asked, `backend` asks.
impl Leases {
    /// A check of `cost` against this server's lease: answered at once
    /// (`Err`: spent from the lease, perhaps with a top-up started), or what
    /// Redis must be asked.
    pub(super) fn spend_or_answer(
        self: &Arc<Self>,
        backend: &RedisBackend,
        key: &Key,
        policy: &Policy,
        cost: u32,
    ) -> Result<Spend, Deciding> {
        if cost == 0 || !Leases::eligible(policy) {
            return Ok(Spend::Alone);
        }
        match self.spend(key, policy, cost) {
            Spend::Spent(spent) => Err(Box::pin(std::future::ready(Ok(spent)))),
            Spend::Refill { want, spent } => Err(self.top_up(backend, key, policy, want, spent)),
            other => Ok(other),
        }
    }

    /// A request admitted from its lease (`spent`), which runs low: top the
    /// lease up on its own, so that no request waits for it (nor for a Redis
    /// that is down). Outside a runtime, the request waits.
    fn top_up(
        self: &Arc<Self>,
        backend: &RedisBackend,
        key: &Key,
        policy: &Policy,
        want: u32,
        spent: Decision,
    ) -> Deciding {
        let (this, backend) = (Arc::clone(self), backend.clone());
        let (key, policy) = (key.clone(), policy.clone());
        let top_up = async move {
            // A failure leaves the lease as it is.
            let _ = this.lease(&backend, &key, &policy, 0, want, 0).await;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(top_up);
                Box::pin(std::future::ready(Ok(spent)))
            }
            Err(_) => Box::pin(async move {
                top_up.await;
                Ok(spent)
            }),
        }
    }

    /// What Redis is asked when the lease did not simply admit the request.
    pub(super) async fn after_spend(
        self: &Arc<Self>,
        backend: &RedisBackend,
        spend: Spend,
        key: &Key,
        policy: &Policy,
        cost: u32,
    ) -> Result<Decision, BackendError> {
        let timeout = backend.link.timeout;
        let spend = match spend {
            // The lease another request is taking, rather than a call of
            // this request's own: at most one timeout.
            Spend::Wait(arrived) => {
                tokio::time::timeout(timeout, arrived).await.map_err(|_| {
                    BackendError::new(format!("no lease from Redis within {timeout:?}"))
                })?;
                match self.spend(key, policy, cost) {
                    Spend::Spent(spent) => return Ok(spent),
                    Spend::Refill { want, spent } => {
                        return self.top_up(backend, key, policy, want, spent).await;
                    }
                    Spend::Wait(_) => Spend::Alone,
                    other => other,
                }
            }
            other => other,
        };
        match spend {
            Spend::Lease { want, back } => self.lease(backend, key, policy, cost, want, back).await,
            _ => backend.decide(key, policy, Ask::Check(cost), None).await,
        }
    }

    /// Decide a request of `cost` taking a lease of `want` units, giving
    /// `back` back; keep what it leaves to spend.
    async fn lease(
        &self,
        backend: &RedisBackend,
        key: &Key,
        policy: &Policy,
        cost: u32,
        want: u32,
        back: u32,
    ) -> Result<Decision, BackendError> {
        let ask = Ask::Lease { cost, want, back };
        let taking = self.taking(key, policy, cost == 0);
        let result = backend.call(key, policy, ask, None).await;
        let left = |(decision, granted): &(Decision, u64)| {
            let left = u32::try_from(*granted).unwrap_or(0).saturating_sub(cost);
            (left, decision.is_allowed().then(|| decision.clone()))
        };
        let (units, decision) = result.as_ref().map_or((0, None), left);
        taking.done(units, decision);
        result.map(|(decision, _)| decision)
    }
}

pub(super) struct Leases {
    servers: u32,
    shards: Box<[Mutex<HashMap<u64, Lease>>]>,
    hasher: RandomState,
}

struct Lease {
    key: Key,
    limits: Box<[u64]>,
    /// Units left to spend.
    units: u32,
    /// Another request is taking the next lease.
    fetching: bool,
    /// A top-up failed: none is tried again until the lease ends (Redis is
    /// likely down; each try would wait its timeout).
    refill_failed: bool,
    /// Told when a lease being taken comes back.
    arrived: Arc<Notify>,
    /// Redis's decision when the lease was taken (none before), and when.
    decision: Option<Decision>,
    at: Instant,
    ends: Instant,
    /// When the window of its fixed-window limits ends, if it has any.
    window_ends: Option<Instant>,
}

/// What a server's lease does for a request.
// Boxing the decisions would cost an allocation on the path leases exist to
// make cheap; a `Spend` lives for one call, as a `Decision` does anyway.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Spend {
    /// Admitted from the lease, without asking Redis.
    Spent(Decision),
    /// Take a lease of `want` units, giving `back` units back, and decide
    /// the request with it.
    Lease { want: u32, back: u32 },
    /// The request was admitted from the lease (`spent`), which runs low:
    /// top it up with `want` more units before answering.
    Refill { want: u32, spent: Decision },
    /// Wait for the lease another request is taking, then spend again.
    Wait(Pin<Box<OwnedNotified>>),
    /// Ask Redis for this request alone.
    Alone,
}

impl Leases {
    pub(super) fn new(servers: u32) -> Self {
        Self {
            servers: servers.max(1),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }

    /// Whether `policy` may be leased (see the module's rules).
    pub(super) fn eligible(policy: &Policy) -> bool {
        policy.penalty().is_none()
            && !policy.counts_denied()
            && policy.limits().iter().all(|l| !l.is_concurrent())
    }

    /// Units one lease takes of `policy`.
    pub(super) fn share(&self, policy: &Policy) -> u32 {
        let per = 30 * self.servers;
        policy
            .limits()
            .iter()
            .map(|l| (l.capacity() / per).max(1))
            .min()
            .unwrap_or(1)
    }

    /// How long a lease of `policy` lasts.
    fn term(policy: &Policy) -> Duration {
        let window = policy
            .limits()
            .iter()
            .map(|l| l.quota().window_micros())
            .min()
            .unwrap_or(Micros::ZERO);
        Duration::from(Micros::new(window.as_u64() / 100))
            .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// How long the current window of `policy`'s fixed-window limits lasts,
    /// as `decision` reports it.
    fn window_end(policy: &Policy, decision: &Decision) -> Option<Duration> {
        policy
            .limits()
            .iter()
            .zip(decision.outcomes())
            .filter(|(l, _)| matches!(l.rule().form(), Form::Fixed(FixedRule::FixedWindow(_))))
            .map(|(_, o)| Duration::from(o.reset_after_micros()))
            .min()
    }

    fn ids(policy: &Policy) -> impl Iterator<Item = u64> + '_ {
        policy.limits().iter().map(|l| l.terms())
    }

    fn slot(&self, key: &Key, policy: &Policy) -> (u64, &Mutex<HashMap<u64, Lease>>) {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(key.as_bytes());
        for id in Self::ids(policy) {
            hasher.write_u64(id);
        }
        let hash = hasher.finish();
        (hash, &self.shards[(hash >> 59) as usize % SHARDS])
    }

    /// Spend `cost` from the lease for `key` under `policy`, or say what to
    /// ask Redis instead.
    pub(super) fn spend(&self, key: &Key, policy: &Policy, cost: u32) -> Spend {
        let share = self.share(policy);
        if share <= cost {
            return Spend::Alone; // a lease would hold nothing beyond this request
        }
        let (hash, shard) = self.slot(key, policy);
        let now = Instant::now();
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lease) = shard.get_mut(&hash) {
            if lease.key != *key || !Self::ids(policy).eq(lease.limits.iter().copied()) {
                return Spend::Alone; // another key's lease in this slot
            }
            if let Some(decision) = lease
                .decision
                .as_ref()
                .filter(|_| now < lease.ends && lease.units >= cost)
                .cloned()
            {
                lease.units -= cost;
                let spent = decision
                    .aged(Micros::from(now - lease.at))
                    .with_origin(Origin::Leased);
                // Below half a share, the next lease is taken while this
                // one is still spent: concurrent requests rarely find it empty.
                if !lease.fetching && !lease.refill_failed && lease.units < share / 2 {
                    lease.fetching = true;
                    return Spend::Refill { want: share, spent };
                }
                return Spend::Spent(spent);
            }
            if lease.fetching {
                // Enabled under the lock, so that the lease's arrival,
                // however soon, is not missed.
                let mut wait = Box::pin(lease.arrived.clone().notified_owned());
                wait.as_mut().enable();
                return Spend::Wait(wait);
            }
            lease.fetching = true;
            let mut back = std::mem::take(&mut lease.units);
            if lease.window_ends.is_some_and(|end| now >= end) {
                back = 0; // counted in a window that has ended: they lapse
            }
            return Spend::Lease { want: share, back };
        }
        if shard.len() >= MAX_LEASES / SHARDS {
            shard.retain(|_, l| l.fetching || (now < l.ends && l.units > 0));
            if shard.len() >= MAX_LEASES / SHARDS {
                return Spend::Alone;
            }
        }
        shard.insert(
            hash,
            Lease {
                key: key.clone(),
                limits: Self::ids(policy).collect(),
                units: 0,
                fetching: true,
                refill_failed: false,
                arrived: Arc::new(Notify::new()),
                decision: None,
                at: now,
                ends: now,
                window_ends: None,
            },
        );
        Spend::Lease {
            want: share,
            back: 0,
        }
    }

    /// The lease asked for `key` came back: `units` more to spend (after
    /// the request that took it), under `decision` (none when Redis failed
    /// or refused). A new lease replaces what was left; a refill adds to it.
    fn taken(
        &self,
        key: &Key,
        policy: &Policy,
        units: u32,
        decision: Option<Decision>,
        refill: bool,
    ) {
        let (hash, shard) = self.slot(key, policy);
        let now = Instant::now();
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(lease) = shard.get_mut(&hash).filter(|l| l.key == *key) else {
            return;
        };
        lease.fetching = false;
        lease.arrived.notify_waiters();
        match (decision, refill) {
            (Some(decision), _) => {
                lease.refill_failed = false;
                lease.units = if refill { lease.units + units } else { units };
                lease.window_ends = Self::window_end(policy, &decision).map(|d| now + d);
                lease.decision = Some(decision);
                lease.at = now;
                lease.ends = now
                    + Self::term(policy).min(lease.window_ends.map_or(Duration::MAX, |e| e - now));
            }
            (None, true) => lease.refill_failed = true, // what is left stays, on its term
            (None, false) => lease.units = 0,
        }
    }

    /// A lease being taken for `key`: if its call is dropped unfinished (the
    /// request went away), the lease is marked as no longer being taken, so
    /// that no later request waits for an answer that will never come.
    pub(super) fn taking<'a>(
        &'a self,
        key: &'a Key,
        policy: &'a Policy,
        refill: bool,
    ) -> Taking<'a> {
        Taking {
            leases: self,
            key,
            policy,
            refill,
            done: false,
        }
    }

    /// Forget the lease of `key` under `policy`: the Redis state its units
    /// were counted in is gone (a reset), so they are neither spent nor
    /// given back, and the next request takes a lease afresh.
    pub(super) fn forget(&self, key: &Key, policy: &Policy) {
        let (hash, shard) = self.slot(key, policy);
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lease) = shard.get_mut(&hash) {
            if lease.key == *key && Self::ids(policy).eq(lease.limits.iter().copied()) {
                lease.units = 0;
                lease.ends = Instant::now();
            }
        }
    }

    /// Units counted in Redis but not spent: held in leases, ended ones
    /// included until they are given back.
    pub(super) fn held(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let shard = s.lock().unwrap_or_else(PoisonError::into_inner);
                shard.values().map(|l| u64::from(l.units)).sum::<u64>()
            })
            .sum()
    }
}

/// See [`Leases::taking`].
pub(super) struct Taking<'a> {
    leases: &'a Leases,
    key: &'a Key,
    policy: &'a Policy,
    refill: bool,
    done: bool,
}

impl Taking<'_> {
    /// The lease came back (see [`Leases::taken`]).
    pub(super) fn done(mut self, units: u32, decision: Option<Decision>) {
        self.done = true;
        let leases = self.leases;
        leases.taken(self.key, self.policy, units, decision, self.refill);
    }
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.leases
                .taken(self.key, self.policy, 0, None, self.refill);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_keys_holds_no_more_leases_than_the_cap() {
        let leases = Leases::new(1);
        let policy: Policy = "1000/s".parse().unwrap();
        let mut alone = 0;
        for i in 0..MAX_LEASES + 5_000 {
            let key = Key::new("ip", i.to_string());
            if let Spend::Alone = leases.spend(&key, &policy, 1) {
                alone += 1;
            }
        }
        let held: usize = leases
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum();
        assert!(held <= MAX_LEASES, "{held} leases held");
        assert!(alone >= 5_000, "{alone} decided alone");
    }

    #[test]
    fn a_share_is_the_smallest_limit_over_thirty_times_the_servers() {
        let leases = Leases::new(10);
        let policy: Policy = "10000/h; 600/min".parse().unwrap();
        assert_eq!(leases.share(&policy), 2); // 600 / 300
        let tiny: Policy = "100/min".parse().unwrap();
        assert_eq!(leases.share(&tiny), 1);
    }
}
