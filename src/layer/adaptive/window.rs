//! The guarded service's recent responses: counts over a sliding window of
//! ten buckets, kept per client, and the evidence they make once no client
//! supplies more than its share of it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

/// What a window of responses saw, as the controller weighs it: each
/// client's responses count at most `max_client_share` of the counted
/// ones, its failures in proportion (see
/// [`Adaptive`](crate::layer::adaptive::Adaptive)'s docs, "Whose evidence").
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServiceHealth {
    /// Responses counted in the window (a client's beyond its share are
    /// not).
    pub responses: f64,
    /// Of them, failures (a client's scaled as its responses were).
    pub failures: f64,
    /// Responses the window holds, every one counted.
    pub seen: u64,
    /// Distinct clients among them (a response whose client is unknown is
    /// a client of its own).
    pub clients: u64,
}

impl ServiceHealth {
    /// Counted failures per counted response (0 without responses).
    pub fn failure_rate(&self) -> f64 {
        if self.responses <= 0.0 {
            0.0
        } else {
            self.failures / self.responses
        }
    }
}

const BUCKETS: usize = 10;

/// Clients a bucket tracks at most. Past them, new clients of that bucket
/// share one entry: memory stays bounded (10 buckets of 2048 entries, and
/// the weighing's scratch space for 20,480: about 2 MB at worst), and so
/// does the weighing under the lock (3.3 ms at worst in a release build
/// here, once a tenth of the window; 5.4 ms at 4096 a bucket). Clients
/// already tracked keep theirs, and the newcomers together count as one
/// client, so made-up identities can neither push anyone out nor gain
/// weight by their number past the cap.
pub(super) const MAX_CLIENTS: usize = 2048;

/// A response's client: a keyed hash of its identity, or none known.
pub(super) type ClientId = Option<u64>;

/// Client ids are keyed SipHash outputs already (random per process): a
/// map of them needs no second hash, and a client cannot aim its ids at
/// one slot.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Ids<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// One tenth of the window.
#[derive(Default)]
struct Bucket {
    /// Which tenth it counts (ms since start / bucket_ms); `u64::MAX`
    /// before its first response.
    tenth: u64,
    /// Its responses, every one.
    seen: u64,
    /// (responses, failures) of each tracked client.
    clients: Ids<(u32, u32)>,
    /// Of clients past [`MAX_CLIENTS`], together.
    overflow: (u64, u64),
    /// Of responses without a known client (each its own client).
    anonymous: (u64, u64),
}

impl Bucket {
    fn clear(&mut self, tenth: u64) {
        self.tenth = tenth;
        self.seen = 0;
        // Keeps the map's memory: a bucket's never outgrows MAX_CLIENTS.
        self.clients.clear();
        self.overflow = (0, 0);
        self.anonymous = (0, 0);
    }
}

/// Responses by the tenth of the window they came in, and by client.
pub(super) struct Window {
    bucket_ms: u64,
    buckets: [Bucket; BUCKETS],
    /// The evaluation's scratch space, kept so that evaluating allocates
    /// nothing once it has grown (at most 10 × MAX_CLIENTS entries).
    merged: Ids<(u64, u64)>,
    sorted: Vec<(u64, u64)>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("bucket_ms", &self.bucket_ms)
            .finish_non_exhaustive()
    }
}

impl Window {
    pub(super) fn new(length: Duration) -> Self {
        let bucket_ms = (length.as_millis() as u64 / BUCKETS as u64).max(1);
        Self {
            bucket_ms,
            buckets: std::array::from_fn(|_| Bucket {
                tenth: u64::MAX,
                ..Bucket::default()
            }),
            merged: Ids::default(),
            sorted: Vec::new(),
        }
    }

    /// Count a response of `client` at `now_ms` (milliseconds since some
    /// start).
    pub(super) fn record(&mut self, now_ms: u64, client: ClientId, failed: bool) {
        let tenth = now_ms / self.bucket_ms;
        let bucket = &mut self.buckets[(tenth % BUCKETS as u64) as usize];
        if bucket.tenth != tenth {
            bucket.clear(tenth);
        }
        bucket.seen += 1;
        let failed32 = u32::from(failed);
        let counts = match client {
            None => None,
            Some(id) => {
                let full = bucket.clients.len() >= MAX_CLIENTS;
                match bucket.clients.get_mut(&id) {
                    Some(counts) => Some(counts),
                    None if full => None,
                    None => Some(bucket.clients.entry(id).or_default()),
                }
            }
        };
        match counts {
            Some((responses, failures)) => {
                *responses = responses.saturating_add(1);
                *failures = failures.saturating_add(failed32);
            }
            None => {
                let into = if client.is_some() {
                    &mut bucket.overflow
                } else {
                    &mut bucket.anonymous
                };
                into.0 += 1;
                into.1 += u64::from(failed);
            }
        }
    }

    fn live(&self, now_ms: u64) -> impl Iterator<Item = &Bucket> {
        let tenth = now_ms / self.bucket_ms;
        let oldest = tenth.saturating_sub(BUCKETS as u64 - 1);
        self.buckets
            .iter()
            .filter(move |b| b.tenth != u64::MAX && b.tenth >= oldest && b.tenth <= tenth)
    }

    /// Responses the last window up to `now_ms` holds, every one counted:
    /// cheap, to skip weighing a window that cannot have enough.
    pub(super) fn seen(&self, now_ms: u64) -> u64 {
        self.live(now_ms).map(|b| b.seen).sum()
    }

    /// What the last window up to `now_ms` saw, each client's responses
    /// counted at most `share` of the counted ones.
    pub(super) fn health(&mut self, now_ms: u64, share: f64) -> ServiceHealth {
        let mut merged = std::mem::take(&mut self.merged);
        let mut sorted = std::mem::take(&mut self.sorted);
        merged.clear();
        sorted.clear();
        let (mut overflow, mut anonymous) = ((0, 0), (0, 0));
        for bucket in self.live(now_ms) {
            for (id, (r, f)) in &bucket.clients {
                let counts = merged.entry(*id).or_default();
                counts.0 += u64::from(*r);
                counts.1 += u64::from(*f);
            }
            overflow.0 += bucket.overflow.0;
            overflow.1 += bucket.overflow.1;
            anonymous.0 += bucket.anonymous.0;
            anonymous.1 += bucket.anonymous.1;
        }
        sorted.extend(merged.values().copied());
        if overflow.0 > 0 {
            sorted.push(overflow);
        }
        let health = weigh(&mut sorted, anonymous, share);
        self.merged = merged;
        self.sorted = sorted;
        health
    }
}

/// The window's evidence when no client supplies more than `share` of it:
/// `clients` holds each known client's (responses, failures) (reordered
/// here), `anonymous` the responses of unknown clients, each a client of
/// its own.
///
/// Each client's responses count `min(r, c)`, its failures
/// `f × min(r, c) / r`, with `c` the largest level at which no client's
/// counted responses exceed `share` of all those counted:
/// `c = share × Σ min(rⱼ, c)`. With fewer than `1 / share` clients no level
/// but 0 does, and nothing counts.
pub(super) fn weigh(
    clients: &mut [(u64, u64)],
    anonymous: (u64, u64),
    share: f64,
) -> ServiceHealth {
    let seen = clients.iter().map(|c| c.0).sum::<u64>() + anonymous.0;
    let count = clients.len() as u64 + anonymous.0;
    let mut health = ServiceHealth {
        seen,
        clients: count,
        ..ServiceHealth::default()
    };
    // Tolerance for share × count landing a hair under 1 (1/3 × 3).
    const EPS: f64 = 1e-9;
    if count == 0 || (count as f64) * share < 1.0 - EPS {
        return health;
    }
    clients.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    // The k largest clients capped at `c`, the rest counted whole: the
    // first k at which the level that solves c = share × (k·c + rest) is
    // at least the largest uncapped client. (g(c) = share × Σ min(rⱼ, c) − c
    // is concave and 0 at 0, so that is its largest root.)
    let mut rest = seen as f64;
    let mut level = f64::INFINITY;
    for k in 0..=clients.len() {
        let largest_uncapped = match clients.get(k) {
            Some((r, _)) => *r as f64,
            None => f64::from(u8::from(anonymous.0 > 0)),
        };
        let room = 1.0 - share * k as f64;
        if room <= EPS {
            // k clients make 1 / share: capped at the smallest of them,
            // each holds exactly its share (nobody else is left, or the
            // count check above would have found a level already).
            level = clients[k - 1].0 as f64;
            break;
        }
        let at = share * rest / room;
        if at >= largest_uncapped * (1.0 - EPS) {
            level = at;
            break;
        }
        rest -= largest_uncapped;
    }
    for (r, f) in clients.iter() {
        let counted = (*r as f64).min(level);
        health.responses += counted;
        if *r > 0 {
            health.failures += *f as f64 * counted / *r as f64;
        }
    }
    health.responses += anonymous.0 as f64;
    health.failures += anonymous.1 as f64;
    health
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARE: f64 = 0.25;

    #[test]
    fn responses_leave_the_window_as_it_slides() {
        let mut window = Window::new(Duration::from_secs(10));
        for ms in (0..5_000).step_by(100) {
            window.record(ms, None, ms % 1_000 == 0);
        }
        let health = window.health(5_000, SHARE);
        assert_eq!((health.responses, health.failures), (50.0, 5.0));
        assert_eq!((health.seen, health.clients), (50, 50));
        assert_eq!(
            window.health(12_000, SHARE).seen,
            20,
            "the first three seconds left"
        );
        assert_eq!(window.health(30_000, SHARE), ServiceHealth::default());
    }

    /// The attack of issue 48 item 6: one client's 20 responses, 3 of
    /// them failures (15%, past the 10% that halves the limit). Alone, or
    /// beside a bystander or two, it is not evidence; beside 3 bystanders
    /// it counts as one client of four, and its 15% cannot carry a service
    /// failing 0% for them.
    #[test]
    fn one_client_cannot_supply_a_window() {
        let mut window = Window::new(Duration::from_secs(10));
        for i in 0..20 {
            window.record(i * 10, Some(666), i % 7 == 0);
        }
        let alone = window.health(1_000, SHARE);
        assert_eq!((alone.seen, alone.clients), (20, 1));
        assert_eq!(alone.responses, 0.0, "one client is no evidence");
        for bystander in 1..=2 {
            window.record(500, Some(bystander), false);
        }
        assert_eq!(window.health(1_000, SHARE).responses, 0.0, "nor three");
        window.record(500, Some(3), false);
        let four = window.health(1_000, SHARE);
        assert_eq!(four.clients, 4);
        // Each counts 1: the attacker's 20 at the bystanders' level.
        assert_eq!(four.responses, 4.0);
        assert!((four.failures - 0.15).abs() < 1e-9, "{four:?}");
        // With share 1 (no cap), the old reading: 3 in 23.
        assert_eq!(window.health(1_000, 1.0).failures, 3.0);
    }

    /// The same 15% spread over many clients is all counted.
    #[test]
    fn failures_spread_over_many_clients_count_whole() {
        let mut window = Window::new(Duration::from_secs(10));
        for i in 0..20u64 {
            window.record(i * 10, Some(i), i % 7 == 0);
        }
        let health = window.health(1_000, SHARE);
        assert_eq!((health.responses, health.failures), (20.0, 3.0));
        assert_eq!(health.clients, 20);
    }

    /// Made-up ids past the cap share one entry per bucket: memory stays
    /// bounded, clients tracked before keep their counts, and the
    /// newcomers weigh as one client.
    #[test]
    fn made_up_clients_past_the_cap_are_one() {
        let mut window = Window::new(Duration::from_secs(10));
        for honest in 0..8 {
            window.record(0, Some(honest), false);
        }
        for forged in 0..100_000u64 {
            window.record(1, Some(1_000_000 + forged), true);
        }
        assert_eq!(window.buckets[0].clients.len(), MAX_CLIENTS);
        assert!(window.buckets[0].clients.capacity() < 2 * MAX_CLIENTS);
        window.record(2, Some(3), false);
        assert_eq!(window.buckets[0].clients[&3], (2, 0), "still tracked");
        let health = window.health(10, SHARE);
        assert_eq!(health.seen, 100_009);
        assert_eq!(health.clients, MAX_CLIENTS as u64 + 1);
        // The overflow (the rest of the forged ids, all failing) counts a
        // quarter at most.
        let overflow = health.responses - MAX_CLIENTS as f64 - 1.0;
        assert!(overflow <= 0.25 * health.responses + 1e-6, "{health:?}");
        // A bucket later, a map no larger.
        for forged in 0..100_000u64 {
            window.record(1_000 + 1, Some(5_000_000 + forged), true);
        }
        assert!(window
            .buckets
            .iter()
            .all(|b| b.clients.len() <= MAX_CLIENTS));
    }

    proptest::proptest! {
        /// Any window: nothing counts with fewer than 1 / share clients;
        /// else no client counts more than `share` of what is counted, a
        /// client is cut only when the cap binds (the level is the largest
        /// that keeps everyone within the share), and each client's
        /// failures are scaled as its responses.
        #[test]
        fn the_weighing_holds_for_any_window(
            clients in proptest::collection::vec((1u64..500, 0u64..500), 0..60),
            anonymous in 0u64..20,
            anonymous_failed in 0u64..20,
            percent in 1u32..=100,
        ) {
            let share = f64::from(percent) / 100.0;
            let mut clients: Vec<_> = clients.into_iter().map(|(r, f)| (r, f.min(r))).collect();
            let anonymous = (anonymous, anonymous_failed.min(anonymous));
            let health = weigh(&mut clients.clone(), anonymous, share);
            let count = clients.len() as u64 + anonymous.0;
            let seen = clients.iter().map(|c| c.0).sum::<u64>() + anonymous.0;
            proptest::prop_assert_eq!((health.seen, health.clients), (seen, count));
            let total = health.responses;
            proptest::prop_assert!(total <= seen as f64 + 1e-6);
            proptest::prop_assert!(health.failures <= total + 1e-6);
            if (count as f64) * share < 1.0 - 1e-9 {
                proptest::prop_assert_eq!(total, 0.0);
                return Ok(());
            }
            proptest::prop_assert!(total > 0.0);
            // The level every client was counted at most.
            clients.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
            let biggest = clients.first().map_or(1, |c| c.0) as f64;
            let level = biggest.min(share * total);
            let tol = 1e-6 * total.max(1.0);
            proptest::prop_assert!(level <= share * total + tol);
            let counted: f64 = clients.iter().map(|c| (c.0 as f64).min(level)).sum::<f64>()
                + anonymous.0 as f64;
            proptest::prop_assert!((counted - total).abs() < tol, "{} vs {}", counted, total);
            if total < seen as f64 - tol {
                // Someone was cut: the cap binds, at exactly the share.
                proptest::prop_assert!((level - share * total).abs() < tol);
            }
            let failures: f64 = clients
                .iter()
                .map(|c| c.1 as f64 * (c.0 as f64).min(level) / c.0 as f64)
                .sum::<f64>()
                + anonymous.1 as f64;
            proptest::prop_assert!((failures - health.failures).abs() < tol);
        }
    }

    /// The level: no client counts more than `share` of the total, and it
    /// is the largest such level (a client is cut only when it must be).
    #[test]
    fn the_level_caps_each_client_at_its_share_and_no_lower() {
        let cases: &[(&[u64], u64, f64)] = &[
            (&[10, 10, 10, 2], 0, 0.25),
            (&[10, 10, 10], 1, 0.25),
            (&[100, 1, 1, 1, 1, 1], 3, 0.25),
            (&[7, 7, 7], 0, 1.0 / 3.0),
            (&[50, 40, 30, 20, 10, 5, 5, 5], 0, 0.25),
            (&[3, 3], 0, 0.5),
            (&[9], 0, 1.0),
            (&[9, 9, 9], 0, 0.25),
            (&[], 7, 0.25),
        ];
        for (responses, anonymous, share) in cases {
            let mut clients: Vec<_> = responses.iter().map(|r| (*r, *r / 2)).collect();
            let health = weigh(&mut clients, (*anonymous, 0), *share);
            let count = responses.len() as u64 + anonymous;
            if (count as f64) * share < 1.0 - 1e-9 {
                assert_eq!(health.responses, 0.0, "{responses:?}");
                continue;
            }
            let total = health.responses;
            let biggest = responses.iter().max().copied().unwrap_or(1) as f64;
            let level = if biggest * (1.0 - 1e-9) > share * total {
                share * total
            } else {
                biggest
            };
            assert!(level <= share * total + 1e-9, "{responses:?}: {health:?}");
            let expected: f64 = responses
                .iter()
                .map(|r| (*r as f64).min(level))
                .sum::<f64>()
                + *anonymous as f64;
            assert!((expected - total).abs() < 1e-6, "{responses:?}: {health:?}");
            assert!(total > 0.0, "{responses:?}");
        }
    }
}
