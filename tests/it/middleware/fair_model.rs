//! An independent model of the fair-share capacity, written from its
//! documented definition alone (the implementation under `src/` was not
//! read), and generated workloads checked against it on the memory and
//! Redis backends with a virtual clock.
//!
//! The model (`mod model`), for `C` requests per window `W`:
//! * depth `D = max(W/10, 20·W/C)`; hard cap: any interval of length `t`
//!   holds at most `t·C/W + D·C/W + 1` admissions;
//! * static shares `s_t = C·w_t/Σw` over the active tenants;
//! * the class rule: critical demand within 20% of `C` served first, then
//!   default, then sheddable demand, each by weighted max-min (water-filling)
//!   over what is left;
//! * each tenant's floor `min(asked, s_t)` (with critical tenants present,
//!   also `min(asked, s'_t)`, `s'_t` the share of `C` less the critical
//!   demand among the others, whichever is smaller).
//!
//! The workloads: 2–8 tenants of random weights and classes at 1/s to
//! 1,000/s, hogs among light tenants; and 2–8 hogs beside 1–3 tenants
//! asking a little over their shares now and then (`beside_hogs`); a crowd
//! arriving together (`crowd`); tenants asking less often than the
//! activity period beside hogs (`seldom`); hogs sending requests together
//! beside tenants asking one request at a time, evenly or at random
//! (`bursts`).
//!
//! Checked per case, after a warm-up of 3 windows and each tenant's first
//! quarter window: the hard cap (over the whole run); a tenant asking at
//! most 95% of its floor share refused at most 1% of its requests; a tenant
//! asking more admitted at least 90% of its floor, less the two requests
//! of its depth it may take just before the measured windows (below 5
//! requests a window, the documented looser bound: one in 8, and 80%);
//! work conservation (at least
//! 90% of `C` when the tenants ask more than `C`); critical requests within the reserve refused at most 1%,
//! and never refused within half a request interval (`W/2C`) of an admitted
//! default or sheddable request; requests of a default tenant within 95% of
//! its share never refused within `W/2C` of an admitted sheddable one. Each
//! check was seen failing on a fault planted in the model. The deviation
//! from the exact max-min allocation is printed, and asserted only within
//! the loose bound that the floors and the cap imply (see `maxmin_bound`).
#![cfg(feature = "redis")]

use proptest::prelude::*;
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::layer::fair_share::FairShare;
use tower_ratelimit::layer::Class;
use tower_ratelimit::Quota;

use crate::support::{unique_name, RedisServer, AGREE};

/// The definition, as pure functions. Rates are in requests per window.
mod model {
    /// A capacity of `c` requests per window of `w_us` µs.
    #[derive(Clone, Copy, Debug)]
    pub struct Capacity {
        pub c: u64,
        pub w_us: u64,
    }

    impl Capacity {
        /// `D = max(W/10, 20·W/C)`, in µs.
        pub fn depth_us(&self) -> f64 {
            (self.w_us as f64 / 10.0).max(20.0 * self.w_us as f64 / self.c as f64)
        }

        /// A tenant is active while it asked in the last `max(2W, 2D)`.
        pub fn activity_us(&self) -> f64 {
            (2.0 * self.w_us as f64).max(2.0 * self.depth_us())
        }

        /// The burst `D·C/W`.
        pub fn burst(&self) -> f64 {
            self.depth_us() * self.c as f64 / self.w_us as f64
        }

        /// The worst interval against the hard cap among sorted admission
        /// times: `(first, last, admissions, allowed)` if any interval
        /// holds more than `t·C/W + D·C/W + 1`. Exact: with
        /// `g(k) = k·W − t_k·C`, the cap is `g(j) − g(i) ≤ D·C` for all
        /// `i < j`, and `10·D·C = max(W·C, 200·W)`.
        pub fn hard_cap_violation(&self, times: &[u64]) -> Option<(u64, u64, usize, f64)> {
            let (w, c) = (self.w_us as i128, self.c as i128);
            let dc10 = (w * c).max(200 * w);
            let mut min: Option<(i128, usize)> = None;
            let mut worst: Option<(i128, usize, usize)> = None;
            for (k, &t) in times.iter().enumerate() {
                let g = k as i128 * w - t as i128 * c;
                if let Some((gi, i)) = min {
                    if 10 * (g - gi) > dc10 && worst.is_none_or(|(e, _, _)| g - gi > e) {
                        worst = Some((g - gi, i, k));
                    }
                }
                if min.is_none_or(|(gi, _)| g < gi) {
                    min = Some((g, k));
                }
            }
            worst.map(|(_, i, j)| {
                let span = (times[j] - times[i]) as f64;
                let allowed = span * self.c as f64 / self.w_us as f64 + self.burst() + 1.0;
                (times[i], times[j], j - i + 1, allowed)
            })
        }
    }

    /// `s_t = C·w_t/Σw`.
    pub fn static_shares(c: f64, weights: &[u32]) -> Vec<f64> {
        let sum: f64 = weights.iter().map(|&w| w as f64).sum();
        weights.iter().map(|&w| c * w as f64 / sum).collect()
    }

    /// The guarantee per tenant: `min(asked, share)`.
    pub fn floor(asked: f64, share: f64) -> f64 {
        asked.min(share)
    }

    /// Weighted max-min (water-filling) of `capacity` among `demands`:
    /// each gets `min(d_i, λ·w_i)`, `λ` the level at which the whole is
    /// given (or every demand met).
    pub fn water_fill(capacity: f64, demands: &[f64], weights: &[f64]) -> Vec<f64> {
        let mut alloc = vec![0.0; demands.len()];
        let mut open: Vec<usize> = (0..demands.len()).filter(|&i| demands[i] > 0.0).collect();
        let mut left = capacity.max(0.0);
        while !open.is_empty() {
            let wsum: f64 = open.iter().map(|&i| weights[i]).sum();
            let level = left / wsum;
            let (met, unmet): (Vec<usize>, Vec<usize>) = open
                .iter()
                .partition(|&&i| demands[i] <= level * weights[i]);
            if met.is_empty() {
                for &i in &open {
                    alloc[i] = level * weights[i];
                }
                break;
            }
            for &i in &met {
                alloc[i] = demands[i];
                left -= demands[i];
            }
            open = unmet;
        }
        alloc
    }

    /// The class rule: critical demand within the reserve (20% of `C`)
    /// first, then default, then sheddable, then critical demand past the
    /// reserve, each by weighted max-min over what is left. `classes`:
    /// 0 critical, 1 default, 2 sheddable.
    pub fn allocation(c: f64, demands: &[f64], weights: &[u32], classes: &[usize]) -> Vec<f64> {
        let w: Vec<f64> = weights.iter().map(|&w| w as f64).collect();
        let of = |class: usize, d: &[f64]| -> Vec<f64> {
            d.iter()
                .zip(classes)
                .map(|(&d, &k)| if k == class { d } else { 0.0 })
                .collect()
        };
        let mut alloc = vec![0.0; demands.len()];
        let mut left = c;
        let give = |cap: f64, d: Vec<f64>, alloc: &mut Vec<f64>| -> f64 {
            let got = water_fill(cap, &d, &w);
            for (a, g) in alloc.iter_mut().zip(&got) {
                *a += g;
            }
            got.iter().sum()
        };
        left -= give(0.2 * c, of(0, demands), &mut alloc);
        left -= give(left, of(1, demands), &mut alloc);
        left -= give(left, of(2, demands), &mut alloc);
        let rest: Vec<f64> = demands.iter().zip(&alloc).map(|(d, a)| d - a).collect();
        give(left, of(0, &rest), &mut alloc);
        alloc
    }
}

const CLASSES: [Class; 3] = [Class::Critical, Class::Default, Class::Sheddable];
const CAPACITIES: [(&str, u64, u64); 8] = [
    ("1/s", 1, 1_000_000),
    ("5/s", 5, 1_000_000),
    ("20/s", 20, 1_000_000),
    ("200/s", 200, 1_000_000),
    ("1000/s", 1000, 1_000_000),
    ("30/min", 30, 60_000_000),
    ("120/min", 120, 60_000_000),
    ("600/min", 600, 60_000_000),
];
const WARM_UP: u64 = 3;
const START: u64 = 1_700_000_000_000_000;

/// One tenant of a case: weight, class (index in `CLASSES`), demand per
/// window, phase (fraction of its interval, or of a window if shorter).
#[derive(Clone, Debug)]
struct Tenant {
    weight: u32,
    class: usize,
    demand: f64,
    phase: f64,
}

#[derive(Clone, Debug)]
struct Case {
    quota: &'static str,
    cap: model::Capacity,
    tenants: Vec<Tenant>,
    windows: u64,
    /// Each request moved by up to this part of its tenant's spacing, at
    /// random (0: evenly spaced), as requests over HTTP come.
    jitter: f64,
    /// The first `.0` tenants send up to `.1` requests together (20 µs
    /// apart), as a client's connections paced alike do, in groups no
    /// further apart than `max(2 T_t, D / 4)` less one of its intervals
    /// `T_t` (within what the definition keeps of a tenant's unused share:
    /// its GCRA's `2 T_t` and what it saves, `⌊0.3 D / T⌋ T_t`); the
    /// others one at a time.
    together: (usize, u32),
    /// The tenants sending one request at a time do so at random (a
    /// Poisson stream at their rate), as independent clients do.
    at_random: bool,
}

/// What a strategy draws for a tenant: weight, hog or not, the fraction of
/// its floor share a light tenant asks (or of the reserve a critical one
/// asks), a hog's multiple of `C`, phase.
type Raw = (u32, bool, f64, f64, f64);

fn raw_case() -> impl Strategy<Value = (usize, Vec<Raw>, bool)> {
    (
        0usize..CAPACITIES.len(),
        prop::collection::vec(
            (
                1u32..=10,
                prop::bool::weighted(0.35),
                0.2f64..0.95,
                1.5f64..10.0,
                0.0f64..1.0,
            ),
            2..=8,
        ),
        prop::bool::weighted(0.3),
    )
}

/// Builds a case from what was drawn, within `budget` calls: tenant 0 is
/// always a hog; with `classy`, the last tenant is critical (asking 5% to
/// 19% of `C`) and the hogs are sheddable.
fn build(capacity: usize, raw: &[Raw], classy: bool, budget: f64) -> Case {
    let (quota, c, w_us) = CAPACITIES[capacity];
    let cap = model::Capacity { c, w_us };
    let cf = c as f64;
    let n = raw.len();
    let weights: Vec<u32> = raw.iter().map(|r| r.0).collect();
    let crit_at = classy.then_some(n - 1);
    // The slowest pace that keeps a tenant active: an interval of half the
    // activity period.
    let min_rate = 2.0 * w_us as f64 / cap.activity_us();
    let crit = crit_at.map_or(0.0, |_| {
        (raw[n - 1].2 / 0.95 * 0.19 * cf)
            .clamp(0.05 * cf, 0.19 * cf)
            .max(min_rate)
    });
    let floors = floor_shares(cf, &weights, crit_at, crit);
    let mut tenants: Vec<Tenant> = raw
        .iter()
        .enumerate()
        .map(|(i, &(weight, hog, frac, factor, phase))| {
            let (class, demand) = if Some(i) == crit_at {
                (0, crit)
            } else if hog || i == 0 {
                (if classy { 2 } else { 1 }, factor * cf)
            } else {
                (1, (frac * floors[i]).max(min_rate))
            };
            Tenant {
                weight,
                class,
                demand,
                phase,
            }
        })
        .collect();
    // Within the budget of calls over at least 20 measured windows, but the
    // hogs together asking at least enough for 1.25·C in all.
    let others: f64 = tenants
        .iter()
        .filter(|t| !is_hog(t, cf))
        .map(|t| t.demand)
        .sum();
    let hogs: f64 = tenants
        .iter()
        .filter(|t| is_hog(t, cf))
        .map(|t| t.demand)
        .sum();
    let allowed = budget / (WARM_UP + 20) as f64 - others;
    let target = hogs.min(allowed).max(1.25 * cf - others).max(0.0);
    for t in tenants.iter_mut().filter(|t| is_hog(t, cf)) {
        t.demand *= target / hogs;
    }
    Case::within(quota, cap, tenants, budget)
}

impl Case {
    /// `tenants` on `cap` for as many windows as `budget` calls allow
    /// after the warm-up: 20 to 200.
    fn within(
        quota: &'static str,
        cap: model::Capacity,
        tenants: Vec<Tenant>,
        budget: f64,
    ) -> Self {
        let total: f64 = tenants.iter().map(|t| t.demand).sum();
        let windows = ((budget / total) as u64)
            .saturating_sub(WARM_UP)
            .clamp(20, 200);
        Case {
            quota,
            cap,
            tenants,
            windows,
            jitter: 0.0,
            together: (0, 1),
            at_random: false,
        }
    }
}

/// Beside 2 to 8 hogs asking 2 to 40 times `C` in all (within `budget`
/// calls), 1 to 3 tenants asking 1.2 to 3.5 times their shares (at least
/// the slowest pace that keeps a tenant active): what hogs asking again
/// within milliseconds of every refusal could take from tenants asking a
/// little more than their shares, now and then.
fn beside_hogs(budget: f64) -> impl Strategy<Value = Case> {
    (
        // 5/s, 20/s, 200/s, 120/min.
        prop_oneof![Just(1usize), Just(2usize), Just(3usize), Just(6usize)],
        prop::collection::vec((1u32..=10, 0.0f64..1.0), 2..=8),
        2.0f64..40.0,
        prop::collection::vec((1u32..=10, 1.2f64..3.5, 0.0f64..1.0), 1..=3),
    )
        .prop_map(move |(capacity, hogs, times, slow)| {
            let (quota, c, w_us) = CAPACITIES[capacity];
            let cap = model::Capacity { c, w_us };
            let cf = c as f64;
            let weights: Vec<u32> = hogs
                .iter()
                .map(|h| h.0)
                .chain(slow.iter().map(|s| s.0))
                .collect();
            let shares = model::static_shares(cf, &weights);
            let min_rate = 2.0 * w_us as f64 / cap.activity_us();
            let tenants: Vec<Tenant> = slow
                .iter()
                .enumerate()
                .map(|(i, &(weight, over, phase))| Tenant {
                    weight,
                    class: 1,
                    demand: (shares[hogs.len() + i] * over).max(min_rate),
                    phase,
                })
                .collect();
            let tenants = after_hogs(&hogs, times * cf, tenants, budget);
            Case::within(quota, cap, tenants, budget)
        })
}

/// Tenants of the default class, each drawn as `(weight, times, phase)`
/// asking `times` its share of `cap` (at least the slowest pace that keeps
/// a tenant active).
fn asking_times_their_shares(cap: model::Capacity, drawn: &[&(u32, f64, f64)]) -> Vec<Tenant> {
    let weights: Vec<u32> = drawn.iter().map(|t| t.0).collect();
    let shares = model::static_shares(cap.c as f64, &weights);
    let min_rate = 2.0 * cap.w_us as f64 / cap.activity_us();
    drawn
        .iter()
        .zip(shares)
        .map(|(&&(weight, times, phase), share)| Tenant {
            weight,
            class: 1,
            demand: (share * times).max(min_rate),
            phase,
        })
        .collect()
}

/// A crowd arriving together: 4 to 10 tenants each asking 1.2 to 3 times
/// its share (weights 1 to 3), beside 1 or 2 tenants asking 30% to 90% of
/// theirs, at 5/s, 20/s, 200/s or 120/min, each request moved by up to a
/// fifth of its spacing, as over HTTP: at most twelve tenants in all, as
/// in the workload that refused light tenants 2 of 67 over HTTP (ten at
/// 2.1 times their shares beside two at 48%). More than sixteen arriving
/// together is in RELIABILITY's "Not done yet".
fn crowd(budget: f64) -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(1usize), Just(2usize), Just(3usize), Just(6usize)],
        prop::collection::vec((1u32..=3, 1.2f64..3.0, 0.0f64..1.0), 4..=10),
        prop::collection::vec((1u32..=3, 0.3f64..0.9, 0.0f64..1.0), 1..=2),
    )
        .prop_map(move |(capacity, crowd, light)| {
            let (quota, c, w_us) = CAPACITIES[capacity];
            let cap = model::Capacity { c, w_us };
            let all: Vec<_> = crowd.iter().chain(&light).collect();
            let tenants = asking_times_their_shares(cap, &all);
            Case {
                jitter: 0.2,
                ..Case::within(quota, cap, tenants, budget)
            }
        })
}

/// Beside 2 to 8 hogs asking 2 to 20 times `C` in all (within `budget`
/// calls) and 0 to 2 tenants asking 30% to 90% of their shares, 1 or 2
/// tenants asking once every 1.1 to 4 activity periods: each time it
/// comes back its state has lapsed and it is new again, and it must be
/// served in full. Each request moved by up to a fifth of its spacing.
fn seldom(budget: f64) -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(1usize), Just(2usize), Just(3usize), Just(6usize)],
        prop::collection::vec((1u32..=10, 0.0f64..1.0), 2..=8),
        2.0f64..20.0,
        prop::collection::vec((1u32..=3, 0.3f64..0.9, 0.0f64..1.0), 0..=2),
        prop::collection::vec((1u32..=10, 1.1f64..4.0, 0.0f64..1.0), 1..=2),
    )
        .prop_map(move |(capacity, hogs, times, light, seldom)| {
            let (quota, c, w_us) = CAPACITIES[capacity];
            let cap = model::Capacity { c, w_us };
            let cf = c as f64;
            let weights: Vec<u32> = hogs
                .iter()
                .map(|h| h.0)
                .chain(light.iter().map(|l| l.0))
                .chain(seldom.iter().map(|s| s.0))
                .collect();
            let shares = model::static_shares(cf, &weights);
            let min_rate = 2.0 * w_us as f64 / cap.activity_us();
            let light =
                light
                    .iter()
                    .zip(&shares[hogs.len()..])
                    .map(|(&(weight, part, phase), share)| Tenant {
                        weight,
                        class: 1,
                        demand: (share * part).max(min_rate),
                        phase,
                    });
            let seldom = seldom.iter().map(|&(weight, periods, phase)| Tenant {
                weight,
                class: 1,
                demand: w_us as f64 / (periods * cap.activity_us()),
                phase,
            });
            let tenants = after_hogs(&hogs, times * cf, light.chain(seldom).collect(), budget);
            Case {
                jitter: 0.2,
                ..Case::within(quota, cap, tenants, budget)
            }
        })
}

/// 2 or 3 hogs of weights 1 to 5, each asking 1.3 to 6 times its share,
/// whose connections, paced alike, send 2 to 12 requests together, beside
/// 0 to 2 tenants asking 30% to 90% of theirs one request at a time
/// (about half the cases at random, 20% to 60% of theirs), at 20/s,
/// 200/s or 1000/s: a tenant keeps the share it leaves unused between
/// such bursts (two hogs of weights 4 and 1, each sending 12 together
/// every 15 ms at 200/s, got 2.1 to 1 while a tenant kept nothing past
/// two of its intervals; a tenant asking at random at half its share was
/// refused 2.6% at 20/s while it kept nothing past them).
fn bursts(budget: f64) -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(2usize), Just(3usize), Just(4usize)],
        prop::collection::vec((1u32..=5, 1.3f64..6.0, 0.0f64..1.0), 2..=3),
        2u32..=12,
        prop::collection::vec((1u32..=3, 0.3f64..0.9, 0.0f64..1.0), 0..=2),
        prop::bool::ANY,
    )
        .prop_map(move |(capacity, hogs, size, mut light, at_random)| {
            let (quota, c, w_us) = CAPACITIES[capacity];
            let cap = model::Capacity { c, w_us };
            if at_random {
                for (_, times, _) in &mut light {
                    *times *= 0.6 / 0.9;
                }
            }
            let all: Vec<_> = hogs.iter().chain(&light).collect();
            let tenants = asking_times_their_shares(cap, &all);
            // At random, a tenant asking fewer than 7 requests in an
            // activity period is quiet for a whole one once in a thousand
            // (`e⁻⁷`) or more often, and comes back a newcomer.
            let active = cap.activity_us() / w_us as f64;
            let at_random = at_random
                && tenants[hogs.len()..]
                    .iter()
                    .all(|t| t.demand * active >= 7.0);
            Case {
                together: (hogs.len(), size),
                at_random,
                ..Case::within(quota, cap, tenants, budget)
            }
        })
}

/// `hogs` (weight, phase) first, asking `total` per window in equal parts
/// (less, so that the case fits `budget` calls over 20 measured windows),
/// then `others`.
fn after_hogs(hogs: &[(u32, f64)], total: f64, others: Vec<Tenant>, budget: f64) -> Vec<Tenant> {
    let asked: f64 = others.iter().map(|t| t.demand).sum();
    let each = total.min(budget / (WARM_UP + 20) as f64 - asked) / hogs.len() as f64;
    let hogs = hogs.iter().map(|&(weight, phase)| Tenant {
        weight,
        class: 1,
        demand: each,
        phase,
    });
    hogs.chain(others).collect()
}

fn is_hog(t: &Tenant, cf: f64) -> bool {
    t.class != 0 && t.demand >= 1.5 * cf
}

/// Each tenant's floor share: its static share, and with a critical tenant
/// asking `crit`, no more than its share of `C − crit` among the others.
fn floor_shares(cf: f64, weights: &[u32], crit_at: Option<usize>, crit: f64) -> Vec<f64> {
    let s = model::static_shares(cf, weights);
    let Some(k) = crit_at else { return s };
    let others: u32 = weights
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != k)
        .map(|(_, &w)| w)
        .sum();
    s.iter()
        .enumerate()
        .map(|(i, &s)| {
            if i == k {
                s
            } else {
                s.min((cf - crit) * weights[i] as f64 / others as f64)
            }
        })
        .collect()
}

/// One decided request: time, tenant, admitted, reported share.
struct Seen {
    at: u64,
    tenant: usize,
    admitted: bool,
    share: u32,
}

/// The requests of a case in time order: each tenant evenly spaced from
/// its phase.
fn schedule(case: &Case) -> Vec<(u64, usize)> {
    let w = case.cap.w_us as f64;
    let end = START + (WARM_UP + case.windows) * case.cap.w_us;
    let mut all = Vec::new();
    let weights: Vec<u32> = case.tenants.iter().map(|t| t.weight).collect();
    let shares = model::static_shares(case.cap.c as f64, &weights);
    for (i, t) in case.tenants.iter().enumerate() {
        let size = if i < case.together.0 {
            // Groups no further apart than the tenant keeps of its unused
            // share, less one of its share's intervals.
            let spacing = w / shares[i];
            let kept = (2.0 * spacing).max(case.cap.depth_us() / 4.0) - spacing;
            case.together.1.min((kept * t.demand / w) as u32).max(1)
        } else {
            1
        };
        let interval = w / t.demand * f64::from(size);
        // A phase anywhere in the tenant's own spacing: tenants of one
        // rate are not bunched into the first window.
        let mut first = START as f64 + t.phase * interval;
        // The tenant's own random numbers: its phase's bits.
        let mut random = t.phase.to_bits() ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut k = 0u64;
        loop {
            random = random
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let uniform = (random >> 11) as f64 / (1u64 << 53) as f64;
            let at = if case.at_random && i >= case.together.0 {
                // Exponential gaps: `first` moves on by each.
                first += -(1.0 - uniform).ln() * interval;
                first as u64
            } else {
                (first + k as f64 * interval + case.jitter * interval * uniform) as u64
            };
            if at >= end {
                break;
            }
            all.extend((0..u64::from(size)).map(|j| (at + 20 * j, i)));
            k += 1;
        }
    }
    all.sort();
    all
}

async fn run(case: &Case, fair: FairShare) -> Vec<Seen> {
    let mut seen = Vec::new();
    for (at, i) in schedule(case) {
        let t = &case.tenants[i];
        let key = format!("tenant{i}");
        let (admitted, share, _retry, _active) = fair
            .decide_at(key.as_bytes(), t.weight, CLASSES[t.class], at)
            .await
            .unwrap();
        seen.push(Seen {
            at,
            tenant: i,
            admitted,
            share,
        });
    }
    seen
}

/// The loose bound on the deviation from max-min, in % of `C`: with every
/// tenant given at least 90% of its floor `f` and at most `C` (plus the
/// burst over the measured windows) given in all, a tenant's allocation
/// `a` and its max-min one `m` (itself at least `f`, with `Σm ≤ C`) differ
/// by at most `C − 0.9·Σf + 0.1·C + burst/windows`: the lending of what
/// is left over is the only freedom the definition gives.
fn maxmin_bound(case: &Case, floors: &[f64]) -> f64 {
    let cf = case.cap.c as f64;
    let sum: f64 = floors.iter().sum();
    100.0 * (cf - 0.9 * sum + 0.1 * cf + (case.cap.burst() + 1.0) / case.windows as f64) / cf
}

/// Every check of the definition on what was decided; `Err` with what
/// failed. `label` names the backend in the printed figures.
fn check(case: &Case, seen: &[Seen], label: &str) -> Result<(), String> {
    let cap = case.cap;
    let cf = cap.c as f64;
    let w = cap.w_us;
    let measure_from = START + WARM_UP * w;
    let m = case.windows as f64;
    let n = case.tenants.len();
    let weights: Vec<u32> = case.tenants.iter().map(|t| t.weight).collect();
    let demands: Vec<f64> = case.tenants.iter().map(|t| t.demand).collect();
    let classes: Vec<usize> = case.tenants.iter().map(|t| t.class).collect();
    let crit_at = classes.iter().position(|&k| k == 0);
    let crit: f64 = crit_at.map_or(0.0, |k| demands[k]);
    let shares = model::static_shares(cf, &weights);
    let floor_share = floor_shares(cf, &weights, crit_at, crit);
    let floors: Vec<f64> = (0..n)
        .map(|i| model::floor(demands[i], floor_share[i]))
        .collect();
    let alloc = model::allocation(cf, &demands, &weights, &classes);

    let mut failures = Vec::new();

    // (1) The hard cap, over the whole run.
    let admitted_at: Vec<u64> = seen.iter().filter(|s| s.admitted).map(|s| s.at).collect();
    if let Some((from, to, count, allowed)) = cap.hard_cap_violation(&admitted_at) {
        failures.push(format!(
            "hard cap: {count} admitted in [{}, {}] µs after the start, at most {allowed:.2} allowed",
            from - START,
            to - START
        ));
    }

    // Per tenant, in the measured windows.
    let mut asked = vec![0u64; n];
    let mut got = vec![0u64; n];
    let mut share_dev: f64 = 0.0;
    // A tenant's requests count once it has been active a quarter window
    // (the definition's guarantee is for tenants past that): a tenant
    // asking once in 20 windows first asks after the warm-up.
    let mut first_at = vec![u64::MAX; n];
    for s in seen {
        first_at[s.tenant] = first_at[s.tenant].min(s.at);
    }
    let measured = |s: &&Seen| s.at >= measure_from && s.at >= first_at[s.tenant] + w / 4;
    for s in seen.iter().filter(measured) {
        asked[s.tenant] += 1;
        got[s.tenant] += u64::from(s.admitted);
        share_dev = share_dev.max((s.share as f64 - shares[s.tenant]).abs());
    }
    // Below 5 requests a window (1/s) the guarantee is the documented
    // looser one: a tenant within its share refused at most one request in
    // 8, one over it admitted at least 80% of its floor (a depth of 20
    // requests shared by tenants whose shares are a fraction of a request
    // a window).
    //
    // A tenant asking more than its share may take its depth (two
    // requests of its share) just before the measured windows begin, and
    // then get that much less in them with nothing lost: the floor of one
    // asking more than a request a window is counted less those two (a
    // tenth of a share measured over 20 windows at 1 a window, a hundredth
    // over 200 at 10).
    let (refusals_in, busy_part) = if cap.c < 5 { (8, 0.8) } else { (100, 0.9) };
    let mut maxmin_dev: f64 = 0.0;
    for i in 0..n {
        let t = &case.tenants[i];
        let taken_before = if t.demand <= 1.0 { 0.0 } else { 2.0 };
        let part = busy_part;
        let refused = asked[i] - got[i];
        let rate = got[i] as f64 / m;
        maxmin_dev = maxmin_dev.max(100.0 * (rate - alloc[i]).abs() / cf);
        if t.class == 0 {
            // (4) Critical within the reserve: admitted whatever the share.
            if t.demand <= 0.2 * cf && refused * 100 > asked[i] {
                failures.push(format!(
                    "critical tenant {i} asking {:.3}/window (reserve {:.3}): {refused} of {} refused",
                    t.demand,
                    0.2 * cf,
                    asked[i]
                ));
            }
        } else if t.demand <= 0.95 * floor_share[i] {
            // (2) At most its share: refused at most 1%.
            if refused * refusals_in > asked[i] {
                failures.push(format!(
                    "floor: tenant {i} asking {:.3}/window (share {:.3}): {refused} of {} refused",
                    t.demand, floor_share[i], asked[i]
                ));
            }
        } else if (got[i] as f64) < part * floors[i] * m - taken_before {
            // (3) More than its share: at least (90% of) the floor.
            failures.push(format!(
                "floor: tenant {i} asking {:.3}/window (share {:.3}) got {rate:.3}/window, floor {:.3}",
                t.demand, floor_share[i], floors[i]
            ));
        }
    }

    // (2) Work conservation.
    let total_asked: f64 = demands.iter().sum();
    let total_got: u64 = got.iter().sum();
    if total_asked > cf && (total_got as f64) < 0.9 * cf * m {
        failures.push(format!(
            "work conservation: {total_got} admitted over {m} windows of {cf}, asked {total_asked:.1}/window"
        ));
    }

    // (4) Priorities, request by request: no request of a critical tenant
    // within the reserve refused within W/2C of an admitted default or
    // sheddable one; no request of a default tenant asking at most 95% of
    // its floor share refused within W/2C of an admitted sheddable one.
    // (A default tenant past its share may be refused for its share while
    // a sheddable tenant within its own is admitted: the definition does
    // not say which comes first, so those are only counted and printed.)
    let eps = w / (2 * cap.c);
    let admitted_of = |pred: &dyn Fn(usize) -> bool| -> Vec<u64> {
        seen.iter()
            .filter(|s| s.admitted && pred(classes[s.tenant]))
            .map(|s| s.at)
            .collect()
    };
    let lower = [admitted_of(&|k| k != 0), admitted_of(&|k| k == 2)];
    let within = |i: usize| match classes[i] {
        0 => demands[i] <= 0.2 * cf,
        _ => demands[i] <= 0.95 * floor_share[i],
    };
    let mut priority = [0usize; 2];
    let mut past_share = 0usize;
    let mut first = [None; 2];
    for s in seen.iter().filter(|s| s.at >= measure_from && !s.admitted) {
        let k = classes[s.tenant];
        if k == 2 {
            continue;
        }
        let times = &lower[k];
        let from = times.partition_point(|&t| t + eps < s.at);
        if times.get(from).is_some_and(|&t| t <= s.at + eps) {
            if within(s.tenant) {
                priority[k] += 1;
                first[k].get_or_insert((s.at - START, s.tenant, times[from] - START));
            } else {
                past_share += 1;
            }
        }
    }
    for (k, what) in [
        (0, "critical refused beside admitted default/sheddable"),
        (
            1,
            "default within its share refused beside admitted sheddable",
        ),
    ] {
        if let Some((at, tenant, other)) = first[k] {
            failures.push(format!(
                "class: {} times {what} (first: tenant {tenant} at {at} µs, the other admitted at {other} µs)",
                priority[k]
            ));
        }
    }

    // (3) Max-min, reported, and held only to the loose bound.
    let bound = maxmin_bound(case, &floors);
    println!(
        "fair_model[{label}] {} over {} windows, {} calls: weights {:?} classes {:?} asked/C {:?} \
         got/C {:?} max-min/C {:?}; total {:.3}·C; max-min deviation {maxmin_dev:.1}% of C (bound {bound:.1}%); \
         reported share off by {share_dev:.2} at most; {past_share} refusals of defaults past \
         their shares beside admitted sheddables",
        case.quota,
        case.windows,
        seen.len(),
        weights,
        classes,
        demands.iter().map(|d| round3(d / cf)).collect::<Vec<_>>(),
        got.iter().map(|&g| round3(g as f64 / m / cf)).collect::<Vec<_>>(),
        alloc.iter().map(|a| round3(a / cf)).collect::<Vec<_>>(),
        total_got as f64 / m / cf,
    );
    if maxmin_dev > bound {
        failures.push(format!(
            "max-min deviation {maxmin_dev:.1}% of C past the bound {bound:.1}%"
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{label} {:?}: {}", case, failures.join("; ")))
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn capacity(quota: &str) -> FairShare {
    FairShare::new(quota.parse::<Quota>().unwrap())
        .unwrap()
        .named(&unique_name("model"))
        .unwrap()
}

#[test]
fn the_model_s_own_arithmetic() {
    // Water-filling: 10 among demands 1, 8, 8 with weights 1, 1, 2: the
    // first is met, the others split 9 as 1:2.
    let a = model::water_fill(10.0, &[1.0, 8.0, 8.0], &[1.0, 1.0, 2.0]);
    assert!(
        (a[0] - 1.0).abs() < 1e-9 && (a[1] - 3.0).abs() < 1e-9 && (a[2] - 6.0).abs() < 1e-9,
        "{a:?}"
    );
    // Critical first, within 20%: 100 with a critical 15, a default 30, a
    // sheddable hog: 15, 30, 55.
    let a = model::allocation(100.0, &[15.0, 30.0, 500.0], &[1, 1, 1], &[0, 1, 2]);
    assert!(
        (a[0] - 15.0).abs() < 1e-9 && (a[1] - 30.0).abs() < 1e-9 && (a[2] - 55.0).abs() < 1e-9,
        "{a:?}"
    );
    // The hard cap at 200/s: a burst of 20 plus one, then nothing more.
    let cap = model::Capacity {
        c: 200,
        w_us: 1_000_000,
    };
    assert!(cap.hard_cap_violation(&[7; 21]).is_none());
    assert!(cap.hard_cap_violation(&[7; 22]).is_some());
    // 1/s: a depth of 20 s; 21 at once, then one a second.
    let cap = model::Capacity {
        c: 1,
        w_us: 1_000_000,
    };
    let times: Vec<u64> = std::iter::repeat_n(0, 21)
        .chain((1..30).map(|k| k * 1_000_000))
        .collect();
    assert!(cap.hard_cap_violation(&times).is_none());
    let mut more = times.clone();
    more.push(29_500_000);
    more.sort();
    assert!(cap.hard_cap_violation(&more).is_some());
}

/// Cases the proptests below drew, written out: at 1/s and 5/s, tenants
/// whose static share is below one request per window (asking at their
/// share or a little over it, one request every 10 s or 2 s) beside hogs;
/// at 20/s, over 23 windows, seven hogs beside three tenants asking 1.7–3
/// times their shares (one got 1.174 of its 1.311 a window while a request
/// refused within its share lost what it was owed; 1.30 now); and seven
/// hogs beside a tenant asking 2.35 times its share, 0.318 of its 0.426 a
/// window while it met the hogs at their priority (0.364 now); at 5/s,
/// eight hogs beside a tenant asking 3.5 times its share, one request
/// every 4 s, 0.055 of its 0.072 a window while less than one request of
/// priority was none; at 5/s, a crowd arriving together beside a tenant
/// asking 46% of its share every 3.9 s, refused once while how far ahead
/// it asked was read as it was at its request before.
/// Each is decided on memory and on Redis and held to every check.
fn cases_seen() -> Vec<Case> {
    let t = |weight, class, demand, phase| Tenant {
        weight,
        class,
        demand,
        phase,
    };
    // Hogs of one demand, each with its weight and phase.
    let hogs = |demand, weights: &[u32], phases: &[f64]| -> Vec<Tenant> {
        weights
            .iter()
            .zip(phases)
            .map(|(&weight, &phase)| t(weight, 1, demand, phase))
            .collect()
    };
    let case = |quota, c, tenants| Case {
        quota,
        cap: model::Capacity { c, w_us: 1_000_000 },
        tenants,
        windows: 200,
        jitter: 0.0,
        together: (0, 1),
        at_random: false,
    };
    // Drawn with each request moved by up to a fifth of its spacing:
    // tenants of the default class, as (weight, demand, phase).
    let jittered = |quota, c, tenants: &[(u32, f64, f64)]| Case {
        jitter: 0.2,
        ..case(
            quota,
            c,
            tenants
                .iter()
                .map(|&(weight, demand, phase)| t(weight, 1, demand, phase))
                .collect(),
        )
    };
    vec![
        case(
            "1/s",
            1,
            vec![
                t(3, 1, 8.512704614844575, 0.3507595182503939),
                t(7, 1, 0.1, 0.7172939709765145),
                t(9, 1, 0.1, 0.41949666644363615),
                t(6, 1, 9.240410126043967, 0.360245193108188),
                t(5, 1, 0.1, 0.4322138012886905),
                t(7, 1, 0.1, 0.6843698384788602),
                t(5, 1, 0.1, 0.31300908116512477),
                t(4, 1, 0.1, 0.5240902032893187),
            ],
        ),
        case(
            "5/s",
            5,
            vec![
                t(3, 1, 34.69543830315451, 0.9899044338521896),
                t(1, 1, 0.5, 0.9047944950040271),
                t(10, 1, 1.0004721645686545, 0.7046823567909011),
                t(10, 1, 0.838413466780943, 0.9930119029458102),
                t(7, 1, 0.5, 0.6867931352076292),
                t(6, 1, 10.511511729538043, 0.5602796327825663),
                t(8, 1, 0.5, 0.5474147314013035),
            ],
        ),
        case(
            "1/s",
            1,
            vec![
                t(3, 1, 1.7184407420454109, 0.7924306511503468),
                t(2, 1, 0.1, 0.7873809389818082),
                t(9, 1, 0.14274932650930425, 0.4930416842027492),
                t(3, 1, 6.58512793525325, 0.3170252370260194),
                t(10, 1, 0.1, 0.41833070580715),
                t(6, 1, 0.1, 0.2729779649959864),
                t(2, 1, 0.1, 0.660087493086461),
                t(6, 1, 0.1, 0.7935962854199466),
            ],
        ),
        Case {
            windows: 23,
            ..case(
                "20/s",
                20,
                [
                    hogs(
                        106.31071479422496,
                        &[10, 6, 6, 10, 9, 2, 9],
                        &[0.925, 0.339, 0.949, 0.435, 0.108, 0.275, 0.761],
                    ),
                    vec![
                        t(4, 1, 2.275277383547752, 0.23905517088104164),
                        t(4, 1, 2.9920279305805937, 0.25437978280877965),
                        t(1, 1, 1.0, 0.10731110673422825),
                    ],
                ]
                .concat(),
            )
        },
        Case {
            windows: 22,
            ..case(
                "20/s",
                20,
                [
                    hogs(
                        112.65882445253179,
                        &[4, 5, 10, 6, 10, 2, 9],
                        &[
                            0.2674821626908523,
                            0.849873272796237,
                            0.5926401663475245,
                            0.4406936146341023,
                            0.25323258192887516,
                            0.9425216467890429,
                            0.48638141267029406,
                        ],
                    ),
                    vec![t(1, 1, 1.0, 0.6428307492143053)],
                ]
                .concat(),
            )
        },
        Case {
            windows: 128,
            ..case(
                "5/s",
                5,
                [
                    hogs(
                        18.873122901131868,
                        &[5, 10, 5, 10, 2, 3, 10, 10],
                        &[
                            0.8037885393925814,
                            0.22418632025063093,
                            0.1926570951787846,
                            0.1484416663129573,
                            0.33675138978683083,
                            0.771060829475023,
                            0.06304340492931264,
                            0.2898188350193554,
                        ],
                    ),
                    vec![
                        t(3, 1, 0.32471320426132366, 0.3649778045488312),
                        t(10, 1, 0.911552005365482, 0.21438731690801202),
                        t(1, 1, 0.25, 0.8777164678978285),
                    ],
                ]
                .concat(),
            )
        },
        jittered(
            "5/s",
            5,
            &[
                (2, 1.567377469711503, 0.7768400198333181),
                (2, 1.4407525593423256, 0.4076296150918957),
                (2, 1.4609739093227982, 0.7359629113277358),
                (3, 2.1529033853392994, 0.6967758530862684),
                (2, 1.665174147595105, 0.8834625496841766),
                (2, 0.9896930745592017, 0.37127033838616624),
                (3, 0.732708049310234, 0.25553571310444034),
                (2, 0.2578861187552547, 0.584842012336212),
            ],
        ),
        // Crowds of twelve arriving together at 20/s and at 5/s: with at
        // most 8 newcomers graduating at once, a tenant of each got 86% to
        // 89% of its floor.
        jittered(
            "20/s",
            20,
            &[
                (1, 1.8464828113304204, 0.5613117277219277),
                (1, 2.2843462000998422, 0.8503428809100687),
                (2, 3.966965334046366, 0.7685699624072272),
                (1, 1.8255506406729543, 0.9517305408910413),
                (2, 2.2131335778591215, 0.48046789799319534),
                (3, 3.5848391177388597, 0.12551201025660674),
                (3, 6.276902419571891, 0.039960500551322484),
                (1, 2.648942962674031, 0.9541716069147985),
                (2, 2.2573615006157235, 0.49736594010852053),
                (1, 2.1204054099234644, 0.4060938466776794),
                (3, 1.0, 0.6913374300534612),
                (2, 1.5531204039578639, 0.6129192254823304),
            ],
        ),
        jittered(
            "5/s",
            5,
            &[
                (1, 0.30470494795560205, 0.5236032437633754),
                (2, 0.6750996557541591, 0.547596490125107),
                (3, 1.3063041606019972, 0.0289513641768698),
                (2, 1.1521424985633029, 0.9792840017803169),
                (1, 0.5885008338789303, 0.1954884902512749),
                (2, 1.2343047747396592, 0.6228474808246275),
                (3, 1.2711950520616329, 0.8921176933068196),
                (3, 1.536459782973676, 0.7577767646481275),
                (1, 0.4292709709750308, 0.8431337559757861),
                (1, 0.4888084413524685, 0.18910660548418717),
                (1, 0.25, 0.005939054172407409),
                (2, 0.25, 0.015813008143844887),
            ],
        ),
        // Eight hogs at 5/s beside two light tenants and two asking
        // seldom, new again each time they come back: with the
        // newcomers' place never growing past 1, a hog got 85% of its
        // floor.
        jittered(
            "5/s",
            5,
            &[
                (6, 5.833234544150651, 0.7678581894866382),
                (7, 5.833234544150651, 0.2575790309592485),
                (10, 5.833234544150651, 0.1924980535678113),
                (10, 5.833234544150651, 0.8408430243748146),
                (10, 5.833234544150651, 0.0535777234477083),
                (9, 5.833234544150651, 0.8888868846494834),
                (4, 5.833234544150651, 0.7312863110399819),
                (3, 5.833234544150651, 0.8160841049624064),
                (1, 0.25, 0.9666339901860934),
                (3, 0.25, 0.947525445387326),
                (1, 0.11019896281100083, 0.6103430192929679),
                (5, 0.09029292972903395, 0.13708410101606605),
            ],
        ),
    ]
}

#[test]
fn the_cases_seen_hold_on_both_backends() {
    let mut failures = Vec::new();
    for case in cases_seen() {
        let rt = runtime();
        let memory = rt.block_on(run(&case, capacity(case.quota)));
        failures.extend(check(&case, &memory, "memory").err());
        let on_redis = rt.block_on(async {
            let backend = RedisBackend::builder(&RedisServer::per_thread_url())
                .timeout(AGREE)
                .connect()
                .await
                .unwrap();
            run(&case, capacity(case.quota).redis(backend)).await
        });
        failures.extend(check(&case, &on_redis, "redis").err());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// Memory backend, up to ~20,000 calls a case (~30,000 at 1000/s,
    /// where 23 windows of an overload of 1.25·C take 28,750).
    #[test]
    fn fair_share_follows_the_model_in_memory((capacity_at, raw, classy) in raw_case()) {
        let case = build(capacity_at, &raw, classy, 20_000.0);
        let seen = runtime().block_on(run(&case, capacity(case.quota)));
        if let Err(failure) = check(&case, &seen, "memory") {
            prop_assert!(false, "{}", failure);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Memory backend, many hogs beside tenants asking a little over their
    /// shares (at most ~20,000 calls a case).
    #[test]
    fn fair_share_follows_the_model_beside_many_hogs(case in beside_hogs(20_000.0)) {
        let seen = runtime().block_on(run(&case, capacity(case.quota)));
        if let Err(failure) = check(&case, &seen, "memory") {
            prop_assert!(false, "{}", failure);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Memory backend, a crowd arriving together beside light tenants (at
    /// most ~20,000 calls a case).
    #[test]
    fn fair_share_follows_the_model_in_a_crowd(case in crowd(20_000.0)) {
        let seen = runtime().block_on(run(&case, capacity(case.quota)));
        if let Err(failure) = check(&case, &seen, "memory") {
            prop_assert!(false, "{}", failure);
        }
    }

    /// Memory backend, tenants asking less often than the activity period
    /// beside hogs (at most ~20,000 calls a case).
    #[test]
    fn fair_share_follows_the_model_for_tenants_asking_seldom(case in seldom(20_000.0)) {
        let seen = runtime().block_on(run(&case, capacity(case.quota)));
        if let Err(failure) = check(&case, &seen, "memory") {
            prop_assert!(false, "{}", failure);
        }
    }

    /// Memory backend, hogs sending requests together (at most ~20,000
    /// calls a case).
    #[test]
    fn fair_share_follows_the_model_for_hogs_asking_in_bursts(case in bursts(20_000.0)) {
        let seen = runtime().block_on(run(&case, capacity(case.quota)));
        if let Err(failure) = check(&case, &seen, "memory") {
            prop_assert!(false, "{}", failure);
        }
    }
}

/// Cases for Redis: the small capacities, at most ~3,000 calls each.
fn on_redis_case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(0usize), Just(1usize), Just(2usize), Just(5usize)],
        raw_case(),
    )
        .prop_map(|(capacity_at, (_, raw, classy))| build(capacity_at, &raw, classy, 3_000.0))
}

/// `case` decided on Redis.
fn run_on_redis(case: &Case) -> Vec<Seen> {
    runtime().block_on(async {
        let backend = RedisBackend::builder(&RedisServer::per_thread_url())
            .timeout(AGREE)
            .connect()
            .await
            .unwrap();
        run(case, capacity(case.quota).redis(backend)).await
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// Redis, the small capacities (at most ~3,000 calls a case).
    #[test]
    fn fair_share_follows_the_model_on_redis(case in on_redis_case()) {
        if let Err(failure) = check(&case, &run_on_redis(&case), "redis") {
            prop_assert!(false, "{}", failure);
        }
    }
}

/// The model over many cases, on demand (`N` cases of each memory
/// generator, 1,000 by default; `WHICH` one of `bursts`, `crowd`, `hogs`, `random`, `seldom`,
/// all by default, or `redis`, the Redis test's cases on Redis; `SEED` a
/// byte for other draws): every break printed, and none allowed.
/// `N=4000 cargo test --all-features --test it -- --ignored
/// fair_model::over_many_cases --nocapture`
#[test]
#[ignore = "minutes: run on demand with N cases"]
fn over_many_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let which = std::env::var("WHICH").ok();
    // SEED draws other cases than the deterministic run's.
    let mut runner = match std::env::var("SEED")
        .ok()
        .and_then(|v| v.parse::<u8>().ok())
    {
        Some(seed) => TestRunner::new_with_rng(
            Default::default(),
            proptest::test_runner::TestRng::from_seed(
                proptest::test_runner::RngAlgorithm::ChaCha,
                &[seed; 32],
            ),
        ),
        None => TestRunner::deterministic(),
    };
    let mut broken = 0;
    for generator in ["random", "hogs", "crowd", "seldom", "bursts", "redis"] {
        let picked = match which.as_deref() {
            Some(w) => w == generator,
            None => generator != "redis",
        };
        if !picked {
            continue;
        }
        for i in 0..n {
            let case = match generator {
                "crowd" => crowd(20_000.0).new_tree(&mut runner).unwrap().current(),
                "seldom" => seldom(20_000.0).new_tree(&mut runner).unwrap().current(),
                "bursts" => bursts(20_000.0).new_tree(&mut runner).unwrap().current(),
                "redis" => on_redis_case().new_tree(&mut runner).unwrap().current(),
                "hogs" => beside_hogs(20_000.0)
                    .new_tree(&mut runner)
                    .unwrap()
                    .current(),
                _ => {
                    let (c, raw, classy) = raw_case().new_tree(&mut runner).unwrap().current();
                    build(c, &raw, classy, 20_000.0)
                }
            };
            let (seen, label) = if generator == "redis" {
                (run_on_redis(&case), "redis")
            } else {
                (
                    runtime().block_on(run(&case, capacity(case.quota))),
                    "memory",
                )
            };
            if let Err(failure) = check(&case, &seen, label) {
                broken += 1;
                println!("{generator}, case {}: {failure}", i + 1);
            }
        }
        println!("{generator}: {n} cases");
    }
    assert_eq!(broken, 0, "cases broken");
}
