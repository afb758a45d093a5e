//! From the file's settings to what the layer runs: keys, a table of
//! routes, tiers, per-key policies and lists, each built with the same
//! builders code would use, and each mistake reported at its place.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use toml::Spanned;

use super::defaults::FileDefaults;
use super::error::ConfigError;
use super::keys::{FileKey, TierOf};
use super::schema::{FileSpec, RouteSpec};
use crate::backend::OnBackendError;
use crate::clock::micros::parse_span;
use crate::key::{ClientIp, Key};
use crate::layer::rate_limit::select::RouteTable;
use crate::layer::{AccessLists, KeyPolicies, NoPolicy};
use crate::policy::PenaltyBox;
use crate::{Algorithm, Limit, Policy};

/// The key names every file has without defining them.
pub(super) const BUILT_IN_KEYS: [&str; 3] = ["ip", "endpoint", "global"];

/// How deep keys may name keys (through `or` and `all`): the compiler and
/// every request's extraction recurse that deep, no deeper.
pub(super) const MAX_KEY_DEPTH: usize = 32;

/// How many extractors one key may run on a request, counting each time a
/// shared key is named again: what a request's extraction costs at most.
pub(super) const MAX_KEY_PARTS: u32 = 64;

/// A file's settings, built.
#[derive(Clone, Debug)]
pub(super) struct Compiled {
    pub(super) routes: RouteTable<Arc<FileRoute>>,
    pub(super) fallback: Option<Arc<FileRoute>>,
    pub(super) tier_of: Option<TierOf>,
    pub(super) lists: AccessLists,
    pub(super) overrides: KeyPolicies,
    pub(super) on_store_failure: OnBackendError,
    pub(super) unmatched: NoPolicy,
}

/// One route: its key and its policy.
#[derive(Clone, Debug)]
pub(super) struct FileRoute {
    pub(super) key: Arc<FileKey>,
    pub(super) policy: RoutePolicy,
}

#[derive(Clone, Debug)]
pub(super) enum RoutePolicy {
    Fixed(Policy),
    /// By the request's tier (each tier's policy scoped by the route).
    Tiered(HashMap<Arc<str>, Policy>),
}

/// Builds a file's settings from `spec`, its `text` giving errors their places.
pub(super) fn compile(
    spec: &FileSpec,
    text: &str,
    defaults: &FileDefaults,
) -> Result<Compiled, ConfigError> {
    Compiler { spec, text }.compile(defaults)
}

pub(super) struct Compiler<'a> {
    pub(super) spec: &'a FileSpec,
    pub(super) text: &'a str,
}

impl Compiler<'_> {
    pub(super) fn error<T>(&self, span: &Spanned<T>, message: impl Into<String>) -> ConfigError {
        ConfigError::at(self.text, Some(span.span().start), message)
    }

    fn compile(&self, defaults: &FileDefaults) -> Result<Compiled, ConfigError> {
        let spec = self.spec;
        let algorithm = match &spec.algorithm {
            Some(name) => self.algorithm(name)?,
            None => defaults.algorithm,
        };
        let client_ip = self.client_ip(defaults)?;
        let keys = self.keys(&client_ip)?;
        let tier_of = self.tier_of()?;
        let tiers = self.tiers(algorithm)?;
        if tier_of.is_some() && tiers.is_empty() {
            let at = spec.tier_of.as_ref().map(|t| t.span().start);
            return Err(ConfigError::at(
                self.text,
                at,
                "[tier_of] without [tiers]: name each tier's limits",
            ));
        }
        let mut routes = RouteTable::default();
        let mut seen = HashMap::new();
        for route in &spec.routes {
            let Some(path) = &route.get_ref().path else {
                return Err(self.error(route, "a route needs a path (\"/api/search\")"));
            };
            let method = self.method(route.get_ref())?;
            if let Some(_earlier) = seen.insert((method.clone(), path.clone()), ()) {
                return Err(self.error(
                    route,
                    format!("{} {path} has a route already", method_name(&method)),
                ));
            }
            let scope = match &method {
                None => path.clone(),
                Some(method) => format!("{method} {path}"),
            };
            let built = self.route(route, Some(&scope), algorithm, &keys, &tiers)?;
            routes.insert(method, path.clone(), Arc::new(built));
        }
        let fallback = match &spec.fallback {
            Some(route) => {
                let r = route.get_ref();
                if r.path.is_some() || r.method.is_some() {
                    return Err(self.error(
                        route,
                        "[fallback] matches every other request: it takes no path or method",
                    ));
                }
                Some(Arc::new(self.route(route, None, algorithm, &keys, &tiers)?))
            }
            None => None,
        };
        if tier_of.is_none()
            && spec
                .routes
                .iter()
                .chain(&spec.fallback)
                .any(|r| r.get_ref().tiered)
        {
            return Err(ConfigError::at(
                self.text,
                None,
                "a route is tiered but the file has no [tier_of] saying which requests get which tier",
            ));
        }
        let compiled = Compiled {
            routes,
            fallback,
            tier_of,
            lists: self.lists(&keys, client_ip)?,
            overrides: self.overrides(&keys, algorithm)?,
            on_store_failure: self.choice(
                &spec.on_store_failure,
                &[
                    ("allow", OnBackendError::Allow),
                    ("deny", OnBackendError::Deny),
                ],
                OnBackendError::Allow,
            )?,
            unmatched: self.choice(
                &spec.unmatched,
                &[
                    ("unlimited", NoPolicy::Unlimited),
                    ("refuse", NoPolicy::Refuse),
                ],
                NoPolicy::Unlimited,
            )?,
        };
        // An empty file is a mistake (cut short, or written over), never
        // "no limits": refused, so that a reload keeps the running version.
        if spec.routes.is_empty()
            && spec.fallback.is_none()
            && spec.overrides.is_empty()
            && spec.lists.is_none()
        {
            return Err(ConfigError::at(
                self.text,
                None,
                "the file limits nothing: no [[routes]], [fallback], [[overrides]] or [lists] (empty, or cut short?)",
            ));
        }
        for (method, path) in &defaults.required_routes {
            let limited = seen.contains_key(&(None, path.clone()))
                || (method.is_some() && seen.contains_key(&(method.clone(), path.clone())));
            if !limited {
                return Err(ConfigError::at(
                    self.text,
                    None,
                    format!(
                        "the application needs limits for {} {path}, which the file lacks ([[routes]] path = {path:?})",
                        method_name(method)
                    ),
                ));
            }
        }
        Ok(compiled)
    }

    fn choice<T: Copy>(
        &self,
        value: &Option<Spanned<String>>,
        options: &[(&str, T)],
        default: T,
    ) -> Result<T, ConfigError> {
        let Some(value) = value else {
            return Ok(default);
        };
        options
            .iter()
            .find(|(name, _)| *name == value.get_ref())
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                let names: Vec<_> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
                self.error(
                    value,
                    format!("{:?}: expected {}", value.get_ref(), names.join(" or ")),
                )
            })
    }

    fn algorithm(&self, name: &Spanned<String>) -> Result<Algorithm, ConfigError> {
        name.get_ref()
            .parse()
            .map_err(|e| self.error(name, format!("{e}")))
    }

    fn method(&self, route: &RouteSpec) -> Result<Option<Method>, ConfigError> {
        let Some(method) = &route.method else {
            return Ok(None);
        };
        let name = method.get_ref().to_ascii_uppercase();
        Method::from_bytes(name.as_bytes()).map(Some).map_err(|_| {
            self.error(
                method,
                format!("{:?} is not an HTTP method", method.get_ref()),
            )
        })
    }

    fn tiers(&self, algorithm: Algorithm) -> Result<HashMap<Arc<str>, Policy>, ConfigError> {
        self.spec
            .tiers
            .iter()
            .map(|(name, limits)| Ok((name.as_str().into(), self.limits(limits, algorithm)?)))
            .collect()
    }

    /// Limits in the quota syntax, with the file's shadow setting.
    fn limits(&self, text: &Spanned<String>, algorithm: Algorithm) -> Result<Policy, ConfigError> {
        let policy = Policy::parse_with(text.get_ref(), algorithm)
            .map_err(|e| self.error(text, e.to_string()))?;
        if self.spec.shadow {
            let shadowed = policy.to_builder().shadow(true).build();
            shadowed.map_err(|e| self.error(text, e.to_string()))
        } else {
            Ok(policy)
        }
    }

    fn route(
        &self,
        spanned: &Spanned<RouteSpec>,
        scope: Option<&str>,
        algorithm: Algorithm,
        keys: &HashMap<String, Arc<FileKey>>,
        tiers: &HashMap<Arc<str>, Policy>,
    ) -> Result<FileRoute, ConfigError> {
        let spec = spanned.get_ref();
        let key = match &spec.key {
            Some(name) => keys.get(name.get_ref()).cloned().ok_or_else(|| {
                self.error(
                    name,
                    format!(
                        "no key named {:?}: define it under [keys], or use ip, endpoint or global",
                        name.get_ref()
                    ),
                )
            })?,
            None => keys["ip"].clone(),
        };
        let algorithm = match &spec.algorithm {
            Some(name) => self.algorithm(name)?,
            None => algorithm,
        };
        let scoped = |policy: Policy| match scope {
            Some(scope) => policy.scoped(scope),
            None => policy,
        };
        if spec.tiered {
            if spec.limits.is_some() || spec.in_flight.is_some() || spec.penalty.is_some() {
                return Err(self.error(
                    spanned,
                    "a tiered route's limits are its tiers': it takes no limits, in_flight or penalty (a default tier goes in [tier_of])",
                ));
            }
            let tiers = tiers
                .iter()
                .map(|(name, policy)| (name.clone(), scoped(policy.clone())))
                .collect();
            return Ok(FileRoute {
                key,
                policy: RoutePolicy::Tiered(tiers),
            });
        }
        if spec.limits.is_none() && spec.in_flight.is_none() {
            return Err(self.error(
                spanned,
                "a route needs limits (\"10/min\"), in_flight, or tiered = true",
            ));
        }
        let mut builder = match &spec.limits {
            Some(text) => {
                let policy = Policy::parse_with(text.get_ref(), algorithm)
                    .map_err(|e| self.error(text, e.to_string()))?;
                policy.to_builder()
            }
            None => Policy::builder(),
        };
        if let Some(in_flight) = &spec.in_flight {
            let f = in_flight.get_ref();
            let mut limit = Limit::concurrent(f.name.as_str(), f.permits)
                .map_err(|e| self.error(in_flight, e.to_string()))?;
            if let Some(lease) = &f.lease {
                limit = limit
                    .lease(self.span(in_flight, lease)?)
                    .map_err(|e| self.error(in_flight, e.to_string()))?;
            }
            builder = builder.with(limit);
        }
        if let Some(penalty) = &spec.penalty {
            let p = penalty.get_ref();
            let mut boxed = PenaltyBox::new(
                p.strikes,
                self.span(penalty, &p.within)?,
                self.span(penalty, &p.ban)?,
            )
            .map_err(|e| self.error(penalty, e.to_string()))?;
            if let Some(max) = &p.max_ban {
                boxed = boxed
                    .max_ban(self.span(penalty, max)?)
                    .map_err(|e| self.error(penalty, e.to_string()))?;
            }
            builder = builder.penalty(boxed);
        }
        let policy = builder
            .shadow(self.spec.shadow || spec.shadow)
            .count_denied(spec.count_denied)
            .build()
            .map_err(|e| self.error(spanned, e.to_string()))?;
        Ok(FileRoute {
            key,
            policy: RoutePolicy::Fixed(scoped(policy)),
        })
    }

    fn span<T>(&self, at: &Spanned<T>, text: &str) -> Result<Duration, ConfigError> {
        parse_span(text).map(Duration::from).ok_or_else(|| {
            self.error(
                at,
                format!("{text:?} is not a length of time (\"90s\", \"5min\", \"1h\")"),
            )
        })
    }

    /// The keys of the client `value` names under the key `key`.
    fn key_values<T>(
        &self,
        keys: &HashMap<String, Arc<FileKey>>,
        at: &Spanned<T>,
        key: &str,
        value: &str,
    ) -> Result<Vec<Key>, ConfigError> {
        let built = keys.get(key).ok_or_else(|| {
            self.error(
                at,
                format!("no key named {key:?}: define it under [keys], or use ip"),
            )
        })?;
        built
            .keys_of(value)
            .map_err(|e| self.error(at, format!("key {key:?}: {e}")))
    }

    fn overrides(
        &self,
        keys: &HashMap<String, Arc<FileKey>>,
        algorithm: Algorithm,
    ) -> Result<KeyPolicies, ConfigError> {
        let mut policies = KeyPolicies::new();
        for spanned in &self.spec.overrides {
            let spec = spanned.get_ref();
            let policy = self.limits(&spec.limits, algorithm)?;
            for key in self.key_values(keys, spanned, &spec.key, &spec.value)? {
                policies = policies.set(key, policy.clone());
            }
        }
        Ok(policies)
    }

    fn lists(
        &self,
        keys: &HashMap<String, Arc<FileKey>>,
        client_ip: ClientIp,
    ) -> Result<AccessLists, ConfigError> {
        let mut lists = AccessLists::new().client_ip(client_ip);
        let Some(spec) = &self.spec.lists else {
            return Ok(lists);
        };
        for net in &spec.deny_networks {
            lists = lists.deny_network(self.network(net)?);
        }
        for net in &spec.allow_networks {
            lists = lists.allow_network(self.network(net)?);
        }
        for entry in &spec.deny {
            for key in self.key_values(keys, entry, &entry.get_ref().key, &entry.get_ref().value)? {
                lists = lists.deny_key(key);
            }
        }
        for entry in &spec.allow {
            for key in self.key_values(keys, entry, &entry.get_ref().key, &entry.get_ref().value)? {
                lists = lists.allow_key(key);
            }
        }
        Ok(lists)
    }
}

fn method_name(method: &Option<Method>) -> &str {
    method.as_ref().map_or("every method of", Method::as_str)
}
