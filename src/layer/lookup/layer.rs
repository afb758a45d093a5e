//! The layer: its settings, and how a request finds its tenant's policy.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tower_layer::Layer;

use crate::key::{Key, KeyExtractor, RequestHead};
use crate::layer::rate_limit::select::{policy_fn, PolicyFn};
use crate::Policy;

use super::cache::{Cache, Entry};
use super::service::LookupService;

/// Looks a tenant's policy up, caches it, and puts it in the request's
/// extensions for the limiter.
///
/// [`PolicyLookup`] is a layer of its own, placed in front of the limiter:
/// it finds the request's tenant (any [`KeyExtractor`]), answers from the
/// cache while an entry is fresh, and otherwise asks `lookup`:
///
/// * **one lookup at a time per tenant**: requests that arrive while it
///   runs wait for the same answer (no stampede on the store);
/// * **a bound on the wait** ([`wait_up_to`](PolicyLookup::wait_up_to),
///   default 100 ms): a request whose lookup has not answered by then is
///   decided by the last policy the tenant had, or the
///   [default](PolicyLookup::new); the lookup goes on and its answer serves
///   the next requests;
/// * **a stale entry** is answered at once and refreshed in the background;
/// * **a failing lookup** is answered by the default (or the last policy),
///   and asked again after [`retry_after`](PolicyLookup::retry_after);
/// * **other tenants never wait** for one tenant's lookup;
/// * **bounded memory**: at most [`max_entries`](PolicyLookup::max_entries)
///   tenants are kept.
///
/// The policy it found rides in the request's extensions; the limiter
/// reads it with [`PolicyLookup::resolver`].
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use tower_ratelimit::key::{Header, Key};
/// use tower_ratelimit::layer::lookup::PolicyLookup;
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// // The contract of a tenant, as a database would give it.
/// async fn contract(tenant: Key) -> Result<Option<Policy>, std::io::Error> {
///     let per_minute = if tenant.as_bytes().ends_with(b"big-co") { 10_000 } else { 100 };
///     Ok(Some(format!("{per_minute}/min").parse().unwrap()))
/// }
///
/// let lookup = PolicyLookup::new(Header::new("x-tenant"), contract, "10/min".parse().unwrap())
///     .ttl(Duration::from_secs(60))
///     .wait_up_to(Duration::from_millis(50));
/// let limiter = RateLimitLayer::new(lookup.resolver()).key(Header::new("x-tenant"));
/// let stack = ServiceBuilder::new().layer(lookup).layer(limiter);
/// # let _ = stack;
/// ```
pub struct PolicyLookup<K, F> {
    pub(super) key: K,
    lookup: Arc<F>,
    default: Policy,
    cache: Arc<Cache>,
    settings: Settings,
}

#[derive(Clone, Copy, Debug)]
struct Settings {
    ttl: Duration,
    retry_after: Duration,
    wait_up_to: Duration,
}

/// The policy a [`PolicyLookup`] found for a request, in its extensions.
#[derive(Clone, Debug)]
pub struct LookedUp(pub Policy);

impl<K, F, Fut, E> PolicyLookup<K, F>
where
    K: KeyExtractor,
    F: Fn(Key) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Policy>, E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    /// Find each request's tenant with `key`, its policy with `lookup`
    /// (`Ok(None)`: the tenant has none of its own), and use `default` while
    /// there is no answer. Defaults: fresh for 60 s, a failure asked again
    /// after 5 s, a request waits at most 100 ms, 100,000 tenants kept.
    pub fn new(key: K, lookup: F, default: Policy) -> Self {
        Self {
            key,
            lookup: Arc::new(lookup),
            default,
            cache: Arc::new(Cache::new(100_000)),
            settings: Settings {
                ttl: Duration::from_secs(60),
                retry_after: Duration::from_secs(5),
                wait_up_to: Duration::from_millis(100),
            },
        }
    }

    /// How long an answer is used before the tenant is looked up again.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// How long after a failed lookup the store is asked again (the
    /// default or the last policy is used meanwhile).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.settings.retry_after = after;
        self
    }

    /// The longest a request waits for its tenant's lookup.
    pub fn wait_up_to(mut self, wait: Duration) -> Self {
        self.settings.wait_up_to = wait;
        self
    }

    /// Keep at most this many tenants (at least 16: one per shard of the cache).
    pub fn max_entries(mut self, max: usize) -> Self {
        self.cache = Arc::new(Cache::new(max));
        self
    }

    /// The policy for `tenant`: from the cache, or after (at most the
    /// bound of) its lookup.
    pub(super) async fn policy(&self, tenant: Key) -> Policy {
        let plan = self.plan(&tenant);
        let found = match plan {
            Plan::Ready(policy) => policy,
            Plan::Wait(mut done, last) => {
                let answered =
                    tokio::time::timeout(self.settings.wait_up_to, done.wait_for(|d| *d))
                        .await
                        .is_ok();
                if answered {
                    self.cache
                        .lock(&tenant)
                        .get(&tenant)
                        .and_then(|e| e.policy.clone())
                } else {
                    last
                }
            }
        };
        found.unwrap_or_else(|| self.default.clone())
    }

    /// Answer from the cache, or start (or join) the tenant's lookup.
    fn plan(&self, tenant: &Key) -> Plan {
        let now = Instant::now();
        let mut entries = self.cache.lock(tenant);
        if let Some(entry) = entries.get(tenant) {
            if now < entry.fresh_until || entry.running.is_some() {
                return match (&entry.running, &entry.policy) {
                    // A stale answer is used at once while it is refreshed.
                    (Some(_), Some(policy)) => Plan::Ready(Some(policy.clone())),
                    (Some(running), None) => Plan::Wait(running.clone(), None),
                    (None, policy) => Plan::Ready(policy.clone()),
                };
            }
        }
        if entries.len() >= self.cache.per_shard && !entries.contains_key(tenant) {
            entries.retain(|_, e| e.running.is_some() || now < e.fresh_until);
            if entries.len() >= self.cache.per_shard {
                // Still full: make room by dropping some tenant (asked
                // again when it returns). The bound holds either way.
                if let Some(victim) = entries.keys().next().cloned() {
                    entries.remove(&victim);
                }
            }
        }
        let (sender, receiver) = watch::channel(false);
        let last = entries.get(tenant).and_then(|e| e.policy.clone());
        entries.insert(
            tenant.clone(),
            Entry {
                policy: last.clone(),
                fresh_until: now,
                running: Some(receiver.clone()),
            },
        );
        drop(entries);
        self.start(tenant.clone(), sender);
        match last {
            Some(policy) => Plan::Ready(Some(policy)),
            None => Plan::Wait(receiver, None),
        }
    }

    /// Run the lookup on a task of its own: it outlives the request that
    /// started it, and its answer is kept for the next ones.
    fn start(&self, tenant: Key, done: watch::Sender<bool>) {
        let (lookup, cache, settings) = (
            Arc::clone(&self.lookup),
            Arc::clone(&self.cache),
            self.settings,
        );
        tokio::spawn(async move {
            let answer = lookup(tenant.clone()).await;
            let now = Instant::now();
            let mut entries = cache.lock(&tenant);
            if let Some(entry) = entries.get_mut(&tenant) {
                entry.running = None;
                match answer {
                    Ok(policy) => {
                        entry.policy = policy;
                        entry.fresh_until = now + settings.ttl;
                    }
                    Err(_error) => {
                        #[cfg(feature = "tracing")]
                        tracing::warn!(error = %_error, tenant = %tenant.redacted(), "policy lookup failed");
                        entry.fresh_until = now + settings.retry_after;
                    }
                }
            }
            drop(entries);
            let _ = done.send(true);
        });
    }
}

impl<K, F> PolicyLookup<K, F> {
    /// The limiter's resolver: the policy this layer found ([`LookedUp`]).
    pub fn resolver(&self) -> PolicyFn<fn(&RequestHead<'_>) -> Option<Policy>> {
        let found: fn(&RequestHead<'_>) -> Option<Policy> =
            |req| req.extensions.get::<LookedUp>().map(|p| p.0.clone());
        policy_fn(found)
    }

    /// Tenants held now.
    pub fn len(&self) -> usize {
        self.cache
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Whether no tenant is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a request does about its tenant's policy.
enum Plan {
    /// Use this one now.
    Ready(Option<Policy>),
    /// Wait (at most the bound) for the lookup under way.
    Wait(watch::Receiver<bool>, Option<Policy>),
}

impl<K: Clone, F> Clone for PolicyLookup<K, F> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            lookup: Arc::clone(&self.lookup),
            default: self.default.clone(),
            cache: Arc::clone(&self.cache),
            settings: self.settings,
        }
    }
}

impl<K, F> fmt::Debug for PolicyLookup<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyLookup")
            .field("settings", &self.settings)
            .field("tenants", &self.len())
            .finish_non_exhaustive()
    }
}

impl<S, K: Clone, F> Layer<S> for PolicyLookup<K, F> {
    type Service = LookupService<S, K, F>;

    fn layer(&self, inner: S) -> Self::Service {
        LookupService {
            inner,
            lookup: self.clone(),
        }
    }
}
