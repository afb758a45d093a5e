//! `Adaptive`: the factor each policy is checked at, and the resolver that applies it.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwapOption;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::classify::Classifier;
use super::controller::HealthController;
use super::window::ServiceHealth;

use super::window::{ClientId, Window};
use crate::key::{ClientIp, Key, KeyError, KeyExtractor};
use crate::layer::rate_limit::select::PolicyResolver;
use crate::layer::{Class, Reserves};
use crate::{key::RequestHead, Live, Policy};

/// An adaptive limit: policies checked at `limit × factor`, where the
/// factor, in `[min_factor, 1]`, follows the health of the service the
/// layer guards, seen in its own responses over a sliding window.
///
/// * [`observer`](Self::observer) is a layer to put *inside* the rate
///   limiter, around the guarded service: it classifies each response
///   ([`Classifier`]: 5xx by default, optionally gRPC codes and a latency
///   target) into the window.
/// * [`policies`](Self::policies) wraps the limiter's policy resolver: each
///   policy comes out scaled by the factor ([`Policy::scaled`]): the same
///   limits, the same identities, so clients keep their state and only the
///   effective capacity changes — on every backend. The quota headers show
///   the effective limit.
/// * Every tenth of a window, once the window holds
///   [`min_responses`](Self::min_responses), the [`HealthController`] ([`Steps`](super::Steps)
///   by default; [`AimdLimits`](super::AimdLimits)) chooses the next factor. A decrease applies at
///   once; an increase at most once a window, a step at a time, so a limit
///   never jumps from the floor to the full in one window (unless the
///   controller is told to).
/// * Each change is logged (feature `tracing`), told to
///   [`on_change`](Self::on_change), and set in the gauge
///   `ratelimit_limit_factor{route, limit}` (feature `metrics`).
/// * [`pin`](Self::pin) is a brownout switch: a factor set by an operator,
///   through a [`Live`] handle, wins until it is cleared.
///
/// ```
/// use std::time::Duration;
/// use axum::{routing::get, Router};
/// use tower_ratelimit::layer::adaptive::{Adaptive, Steps};
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// let adaptive = Adaptive::new(Steps::default())
///     .named("/api/report")
///     .window(Duration::from_secs(10))
///     .min_responses(20);
/// let policy: Policy = "report = 60/min".parse()?;
/// let app: Router = Router::new()
///     .route("/api/report", get(|| async { "report" }))
///     // Inside the limiter: only admitted requests reach the service.
///     .route_layer(adaptive.observer())
///     .route_layer(RateLimitLayer::new(adaptive.policies(policy)));
/// // Under 20% errors (seen by 4 clients or more, see "Whose evidence"):
/// // RateLimit-Policy says q=30; once they stop, q=60 again.
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Whose evidence
///
/// The factor applies to every client, so no one client may choose it.
/// Counted whole, a window of 20 responses could be one client's, timed
/// so that it caught 3 of the service's failures: a service failing 8% of
/// the time (under the 10% that halves the limit) then halved everyone's
/// limit. So the window is weighed by client ([`clients`](Self::clients):
/// the peer address by default), and no client supplies more than a share
/// `s` ([`max_client_share`](Self::max_client_share), 1/4 by default) of
/// its evidence. With client `i`'s `rᵢ` responses and `fᵢ` failures in the
/// window, each counts
///
/// ```text
/// responses  min(rᵢ, c)
/// failures   fᵢ × min(rᵢ, c) / rᵢ
/// ```
///
/// where the cap `c` is the largest level at which no client counts more
/// than `s` of all that is counted: `c = s × Σⱼ min(rⱼ, c)` (water-filling:
/// only the clients above the level are cut, each to it). The failure rate
/// the [`HealthController`](super::HealthController) sees is the counted failures over
/// the counted responses ([`ServiceHealth`]), and the factor moves only
/// once the counted responses reach [`min_responses`](Self::min_responses).
///
/// What it means:
///
/// * It takes at least `1 / s` clients (4 by default) for anything to
///   count: with fewer, no level but 0 keeps each within its share. A
///   service with one or two clients (or all of them behind one proxy:
///   give [`clients`](Self::clients) a [`ClientIp`](crate::key::ClientIp)
///   that trusts it) keeps its whole limit whatever its health; a log line
///   (feature `tracing`) says so once. Set the share to 1 (every response
///   counted whole) or 1/2 where that is wanted: then one client, or two,
///   do choose the factor.
/// * A client's failure rate is kept, its weight cut: a client whose own
///   requests all fail adds at most `s` to the failure rate.
/// * A response whose client cannot be found (no peer address in the
///   request, an extractor that finds no key) counts as a client of its
///   own, as every response did before clients were weighed: a server
///   that cannot tell its clients apart cannot weigh them.
/// * Clients are kept as a keyed 64-bit hash, at most 2048 per tenth of
///   the window; past them, the newcomers (of every tenth together)
///   count as one client. Made-up identities push nobody out and weigh no more than
///   one client past the cap; within it, each is a client, so the
///   identity must be one a client cannot make up cheaply (an address, an
///   authenticated user; not a header it sends).
/// * The cost per response is a hash of the client's key and a map update
///   under the lock it took already; the weighing (a sort of the window's
///   clients) happens once a tenth of a window, only when the window holds
///   `min_responses` responses (3.3 ms at worst, with every tenth at the
///   cap, in a release build; BENCHMARKS.md has the cost per request).
#[derive(Clone)]
pub struct Adaptive {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    name: Arc<str>,
    controller: Box<dyn HealthController>,
    pub(super) classifier: Classifier,
    length: Duration,
    min_responses: u64,
    min_factor: f64,
    /// Who sent a request ([`Adaptive::clients`]), and the key its
    /// identity is hashed with (random per process, so that no client can
    /// choose ids that collide with another's).
    identify: Identify,
    ids: RandomState,
    max_client_share: f64,
    /// Whether the log was told that too few clients hold the factor.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    warned: AtomicBool,
    start: Instant,
    /// The factor the controller set, as f64 bits.
    factor: AtomicU64,
    pinned: Live<Option<f64>>,
    /// The last policy scaled for each class: (base, factor bits,
    /// scaled). A request of the same policy at the same factor reads it
    /// without a lock (the base is kept, so its address is never another
    /// policy's meanwhile).
    last: [ArcSwapOption<(Policy, u64, Policy)>; 3],
    /// A request's class, and what each class may fill while the factor
    /// is below 1.
    classes: Option<(ClassOf, Reserves)>,
    state: Mutex<State>,
    on_change: Option<Box<Tell>>,
}

type Tell = dyn Fn(&FactorChange) + Send + Sync;
type ClassOf = Box<dyn Fn(&RequestHead<'_>) -> Class + Send + Sync>;
type Identify = Box<dyn Fn(&RequestHead<'_>) -> Result<Key, KeyError> + Send + Sync>;

/// The window and when the factor last moved.
struct State {
    window: Window,
    /// Milliseconds since start of the last evaluation, and of the last
    /// change.
    evaluated_ms: u64,
    changed_ms: u64,
    /// Scaled policies by their base (kept, so an address is never reused
    /// while it is here) and factor.
    scaled: Vec<(Policy, u64, Policy)>,
    /// The limit names seen, for the gauge.
    limits: Vec<Arc<str>>,
}

/// A change of an adaptive limit's factor, and why.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct FactorChange {
    /// The adaptive limit's name ([`Adaptive::named`]).
    pub name: Arc<str>,
    /// The factor before.
    pub from: f64,
    /// The factor now.
    pub to: f64,
    /// What the window saw.
    pub health: ServiceHealth,
}

impl fmt::Display for FactorChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: limits at {:.2} of their numbers (were {:.2}): {:.1}% failures in {:.0} responses from {} clients",
            self.name,
            self.to,
            self.from,
            100.0 * self.health.failure_rate(),
            self.health.responses,
            self.health.clients
        )
    }
}

/// The share of a window's counted responses one client may supply.
const DEFAULT_SHARE: f64 = 0.25;

fn identify(clients: impl KeyExtractor) -> Identify {
    Box::new(move |req| clients.extract(req))
}

/// Most scaled policies kept at once (a resolver that makes a new policy
/// per request would otherwise grow the cache).
const MAX_SCALED: usize = 64;

impl Adaptive {
    /// An adaptive limit following `controller`: a window of 10 s, at least
    /// 20 responses before it acts, a factor of at least 0.1.
    pub fn new(controller: impl HealthController) -> Self {
        let length = Duration::from_secs(10);
        let inner = Inner {
            name: "adaptive".into(),
            controller: Box::new(controller),
            classifier: Classifier::default(),
            length,
            min_responses: 20,
            min_factor: 0.1,
            identify: identify(ClientIp::new()),
            ids: RandomState::new(),
            max_client_share: DEFAULT_SHARE,
            warned: AtomicBool::new(false),
            start: Instant::now(),
            factor: AtomicU64::new(1.0f64.to_bits()),
            pinned: Live::new(None),
            last: Default::default(),
            classes: None,
            state: Mutex::new(State {
                window: Window::new(length),
                evaluated_ms: 0,
                changed_ms: 0,
                scaled: Vec::new(),
                limits: Vec::new(),
            }),
            on_change: None,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// A setting changed, before the handle is cloned (its clones share
    /// one factor, which settings must not split).
    ///
    /// # Panics
    ///
    /// If the handle was cloned already: a mistake in setting it up.
    fn with(mut self, set: impl FnOnce(&mut Inner)) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("configure an Adaptive before cloning it");
        set(inner);
        self
    }

    /// Its name in logs, changes and the gauge's `route` label.
    pub fn named(self, name: impl Into<Arc<str>>) -> Self {
        let name = name.into();
        self.with(|i| i.name = name)
    }

    /// How far back responses count (default 10 s).
    pub fn window(self, length: Duration) -> Self {
        let length = length.max(Duration::from_millis(10));
        self.with(|i| {
            i.length = length;
            i.state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .window = Window::new(length);
        })
    }

    /// How many responses a window needs before the factor moves (default 20).
    pub fn min_responses(self, responses: u64) -> Self {
        self.with(|i| i.min_responses = responses.max(1))
    }

    /// The lowest factor (default 0.1; at most 1).
    pub fn min_factor(self, factor: f64) -> Self {
        let factor = if factor.is_finite() {
            factor.clamp(0.001, 1.0)
        } else {
            0.1
        };
        self.with(|i| i.min_factor = factor)
    }

    /// Who sent each request, so that no client supplies more than
    /// [`max_client_share`](Self::max_client_share) of the evidence the
    /// factor follows (see [`Adaptive`]'s docs, "Whose evidence"). By
    /// default the peer address ([`ClientIp::new`]: axum's `ConnectInfo<SocketAddr>`, a
    /// [`PeerAddr`](crate::key::PeerAddr) or `SocketAddr` extension; IPv6
    /// by /64), and behind proxies that is the proxy's: give the
    /// [`ClientIp`] that trusts them. A request whose client the extractor
    /// cannot find counts as a client of its own.
    ///
    /// Choose an identity a client cannot make up cheaply: whoever can
    /// present four identities (at the default share) supplies a whole
    /// window. Keys are kept as a keyed 64-bit hash, a few thousand per
    /// tenth of the window at most.
    pub fn clients(self, clients: impl KeyExtractor) -> Self {
        let identify = identify(clients);
        self.with(|i| i.identify = identify)
    }

    /// The most one client's responses count of a window's counted
    /// responses (default 1/4; between 0.01 and 1). The factor moves only
    /// once a window counts [`min_responses`](Self::min_responses), which
    /// takes at least `1 / share` clients: 4 by default. `1.0` counts
    /// every response whoever sent it (one client may then choose the
    /// factor everyone gets).
    pub fn max_client_share(self, share: f64) -> Self {
        let share = if share.is_finite() {
            share.clamp(0.01, 1.0)
        } else {
            DEFAULT_SHARE
        };
        self.with(|i| i.max_client_share = share)
    }

    /// Which responses are failures (default: 5xx).
    pub fn classifier(self, classifier: Classifier) -> Self {
        self.with(|i| i.classifier = classifier)
    }

    /// Classes: while the factor is below 1 (the service is struggling),
    /// sheddable requests are refused first, then default ones. A request
    /// is checked at `factor × fill` of each limit, its class's fill by
    /// `reserves` ([`Reserves::STANDARD`]: critical requests 100%, default
    /// ones 80%, sheddable ones 70%); every class counts in the same
    /// state, so once a client has used 70% of its reduced limit only its
    /// default and critical requests pass, and past 80% only its critical
    /// ones. At a factor of 1 every class has the whole limit. Without it,
    /// every request is checked at the factor.
    pub fn classes(
        self,
        class: impl Fn(&RequestHead<'_>) -> Class + Send + Sync + 'static,
        reserves: Reserves,
    ) -> Self {
        let class: ClassOf = Box::new(class);
        self.with(|i| i.classes = Some((class, reserves)))
    }

    /// Told of every change of the factor.
    pub fn on_change(self, tell: impl Fn(&FactorChange) + Send + Sync + 'static) -> Self {
        self.with(|i| i.on_change = Some(Box::new(tell)))
    }

    /// The brownout switch: set `Some(factor)` to hold the limits there
    /// whatever the service's health, `None` to let them follow it again.
    pub fn pin(&self) -> &Live<Option<f64>> {
        &self.inner.pinned
    }

    /// The factor in force: the pinned one, else the controller's.
    pub fn factor(&self) -> f64 {
        match **self.inner.pinned.load() {
            Some(pinned) if pinned.is_finite() => pinned.clamp(self.inner.min_factor, 1.0),
            _ => f64::from_bits(self.inner.factor.load(Ordering::Acquire)),
        }
    }

    /// What the current window saw, weighed by client.
    pub fn health(&self) -> ServiceHealth {
        let now = self.now_ms();
        self.lock().window.health(now, self.inner.max_client_share)
    }

    /// `resolver`'s policies, scaled by the factor.
    pub fn policies<P: PolicyResolver>(&self, resolver: P) -> AdaptivePolicies<P> {
        AdaptivePolicies {
            resolver,
            adaptive: self.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        self.inner.start.elapsed().as_millis() as u64
    }

    /// The client of a request: a keyed hash of its identity, if found.
    pub(super) fn client_of(&self, req: &RequestHead<'_>) -> ClientId {
        let key = (self.inner.identify)(req).ok()?;
        Some(self.inner.ids.hash_one(key.as_bytes()))
    }

    /// Count a response of `client`, and let the controller move the
    /// factor if a tenth of a window has passed since it last looked.
    pub(super) fn record(&self, client: ClientId, failed: bool) {
        self.record_at(self.now_ms(), client, failed);
    }

    fn record_at(&self, now: u64, client: ClientId, failed: bool) {
        let mut state = self.lock();
        state.window.record(now, client, failed);
        let tenth = (self.inner.length.as_millis() as u64 / 10).max(1);
        if now.saturating_sub(state.evaluated_ms) < tenth {
            return;
        }
        state.evaluated_ms = now;
        let min = self.inner.min_responses;
        if state.window.seen(now) < min {
            return;
        }
        let health = state.window.health(now, self.inner.max_client_share);
        // A hair of tolerance: 20 responses weighed may sum to 19.999….
        if health.responses < min as f64 - 1e-6 {
            self.too_few_clients(&health);
            return;
        }
        let current = f64::from_bits(self.inner.factor.load(Ordering::Acquire));
        let target = self
            .inner
            .controller
            .next(current, &health)
            .clamp(self.inner.min_factor, 1.0);
        let next = if target < current {
            target
        } else if target > current
            && now.saturating_sub(state.changed_ms) >= self.inner.length.as_millis() as u64
        {
            // Recovery: a step at a time, at most once a window.
            self.inner
                .controller
                .step_up(current, target)
                .clamp(current, target)
        } else {
            current
        };
        if next == current {
            return;
        }
        state.changed_ms = now;
        self.inner.factor.store(next.to_bits(), Ordering::Release);
        let limits = state.limits.clone();
        drop(state);
        let change = FactorChange {
            name: self.inner.name.clone(),
            from: current,
            to: next,
            health,
        };
        self.told(&change, &limits);
    }

    /// A window that would have been enough before clients were weighed:
    /// said once in the log, for a service behind a proxy whose clients
    /// all look like one.
    fn too_few_clients(&self, health: &ServiceHealth) {
        #[cfg(feature = "tracing")]
        if !self.inner.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                route = %self.inner.name,
                responses = health.seen,
                clients = health.clients,
                max_client_share = self.inner.max_client_share,
                "adaptive limit: too few clients in the window for the factor to move \
                 (behind a proxy? give Adaptive::clients a ClientIp that trusts it)"
            );
        }
        #[cfg(not(feature = "tracing"))]
        let _ = health;
    }

    fn told(&self, change: &FactorChange, limits: &[Arc<str>]) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            route = %change.name,
            factor = change.to,
            previous = change.from,
            failure_rate = change.health.failure_rate(),
            responses = change.health.responses,
            clients = change.health.clients,
            "adaptive limit scaled"
        );
        #[cfg(feature = "metrics")]
        for limit in limits {
            gauge(&change.name, limit, change.to);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = limits;
        if let Some(tell) = &self.inner.on_change {
            tell(change);
        }
    }

    /// `base` at the factor in force for a request of `req`'s class.
    fn scale(&self, base: Policy, req: &RequestHead<'_>) -> Policy {
        let mut factor = self.factor();
        let mut class = Class::Critical;
        if let Some((class_of, reserves)) = &self.inner.classes {
            class = class_of(req);
            if factor < 1.0 {
                factor *= f64::from(reserves.fill(class)) / 100.0;
            }
        }
        let bits = factor.to_bits();
        let last = &self.inner.last[class.index()];
        if let Some((last, at, scaled)) = last.load().as_deref() {
            if *at == bits && last.address() == base.address() {
                return scaled.clone();
            }
        }
        let scaled = self.scale_locked(&base, factor);
        last.store(Some(Arc::new((base, bits, scaled.clone()))));
        scaled
    }

    /// `base` at `factor`, from the cache of scaled policies (and its limit
    /// names noted for the gauge).
    fn scale_locked(&self, base: &Policy, factor: f64) -> Policy {
        let mut state = self.lock();
        if state.limits.len() < 16 {
            for limit in base.limits() {
                if !state.limits.iter().any(|l| **l == *limit.name()) {
                    let name = limit.shared_name().clone();
                    #[cfg(feature = "metrics")]
                    gauge(&self.inner.name, &name, factor);
                    state.limits.push(name);
                }
            }
        }
        if factor >= 1.0 {
            return base.clone();
        }
        let bits = factor.to_bits();
        let found = state
            .scaled
            .iter()
            .find(|(b, f, _)| *f == bits && b.address() == base.address())
            .map(|(_, _, scaled)| scaled.clone());
        if let Some(scaled) = found {
            return scaled;
        }
        let scaled = base.scaled(factor);
        if state.scaled.len() >= MAX_SCALED {
            state.scaled.clear();
        }
        state.scaled.push((base.clone(), bits, scaled.clone()));
        scaled
    }
}

#[cfg(feature = "metrics")]
fn gauge(route: &Arc<str>, limit: &Arc<str>, factor: f64) {
    metrics::gauge!(
        "ratelimit_limit_factor",
        "route" => route.to_string(),
        "limit" => limit.to_string()
    )
    .set(factor);
}

impl fmt::Debug for Adaptive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adaptive")
            .field("name", &self.inner.name)
            .field("factor", &self.factor())
            .finish_non_exhaustive()
    }
}

/// A policy resolver's policies at an [`Adaptive`] factor.
#[derive(Clone, Debug)]
pub struct AdaptivePolicies<P> {
    resolver: P,
    adaptive: Adaptive,
}

impl<P: PolicyResolver> PolicyResolver for AdaptivePolicies<P> {
    fn resolve(&self, req: &RequestHead<'_>) -> Option<Policy> {
        Some(self.adaptive.scale(self.resolver.resolve(req)?, req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PeerAddr;
    use crate::layer::adaptive::Steps;

    fn adaptive(share: f64) -> Adaptive {
        Adaptive::new(Steps::default())
            .window(Duration::from_secs(1))
            .min_responses(20)
            .max_client_share(share)
    }

    /// 20 responses of `client_of(i)`, 3 of them failures (15%: over the
    /// 10% that halves the limit), then one more a tenth later, which
    /// evaluates the window.
    fn a_window_of_15_percent(adaptive: &Adaptive, client_of: impl Fn(u64) -> ClientId) {
        for i in 0..20 {
            adaptive.record_at(10 + i, client_of(i), i % 7 == 0);
        }
        adaptive.record_at(150, client_of(20), false);
    }

    /// Issue 48 item 6: one client's window of 3 failures in 20 halved
    /// everyone's limit. Now it moves nothing; counted whole (a share of
    /// 1, the old reading) it halves the limit.
    #[test]
    fn one_client_does_not_choose_the_factor() {
        let weighed = adaptive(0.25);
        a_window_of_15_percent(&weighed, |_| Some(7));
        assert_eq!(weighed.factor(), 1.0);
        let health = weighed.lock().window.health(150, 0.25);
        assert_eq!(
            (health.seen, health.clients, health.responses),
            (21, 1, 0.0)
        );

        let whole = adaptive(1.0);
        a_window_of_15_percent(&whole, |_| Some(7));
        assert_eq!(whole.factor(), 0.5);
    }

    /// The same failures, each from a client of its own (or of no known
    /// identity), halve the limit.
    #[test]
    fn the_same_failures_from_many_clients_move_the_factor() {
        let adaptive = adaptive(0.25);
        a_window_of_15_percent(&adaptive, Some);
        assert_eq!(adaptive.factor(), 0.5);
        let anonymous = self::adaptive(0.25);
        a_window_of_15_percent(&anonymous, |_| None);
        assert_eq!(anonymous.factor(), 0.5);
    }

    /// Four clients are the fewest the default share counts: the attacker
    /// among three bystanders weighs as one of four.
    #[test]
    fn a_client_among_others_weighs_its_share() {
        let adaptive = adaptive(0.25);
        // The attacker: 40 responses, 6 failures (15%).
        for i in 0..40 {
            adaptive.record_at(10 + i, Some(666), i % 7 == 0);
        }
        // Three bystanders, 8 responses each, none failing.
        for i in 0..24 {
            adaptive.record_at(60 + i, Some(i % 3), false);
        }
        adaptive.record_at(150, Some(0), false);
        // Counted: 8 each (the bystander with 9 is cut too), 32 in all;
        // the attacker's 1.2 failures in them are under 5%.
        assert_eq!(adaptive.factor(), 1.0);
        let health = adaptive.lock().window.health(150, 0.25);
        assert_eq!((health.responses, health.clients), (32.0, 4));
        assert!(health.failure_rate() < 0.05, "{health:?}");
    }

    /// The default identity is the peer address (an IPv6 client by its
    /// /64); a request without one is a client of its own.
    #[test]
    fn clients_are_peers_by_default() {
        let adaptive = adaptive(0.25);
        let from = |peer: Option<&str>| {
            let mut req = http::Request::get("/").body(()).unwrap();
            if let Some(peer) = peer {
                req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
            }
            adaptive.client_of(&RequestHead::from(&req))
        };
        let one = from(Some("192.0.2.1:1000"));
        assert!(one.is_some());
        assert_eq!(
            one,
            from(Some("192.0.2.1:2000")),
            "the port is not the client"
        );
        assert_ne!(one, from(Some("192.0.2.2:1000")));
        assert_eq!(from(Some("[2001:db8::1]:1")), from(Some("[2001:db8::2]:1")));
        assert_eq!(from(None), None);

        let by_user = self::adaptive(0.25).clients(crate::key::Header::new("x-user-id"));
        let req = http::Request::get("/")
            .header("x-user-id", "ann")
            .body(())
            .unwrap();
        assert!(by_user.client_of(&RequestHead::from(&req)).is_some());
    }
}
