//! From the file's settings to what the layer runs: keys, a table of
//! routes, tiers, per-key policies and lists, each built with the same
//! builders code would use, and each mistake reported at its place.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};
use ipnet::IpNet;
use toml::Spanned;

use super::error::ConfigError;
use super::schema::{FileSpec, KeySpec, RouteSpec};
use super::{FileDefaults, Tier};
use crate::backend::OnBackendError;
use crate::clock::micros::parse_span;
use crate::key::{ApiKey, ClientIp, ForwardedHeader, Header, Key, KeyError, KeyExtractor};
use crate::layer::rate_limit::select::RouteTable;
use crate::layer::{AccessLists, KeyPolicies, NoPolicy};
use crate::policy::PenaltyBox;
use crate::{key::RequestHead, Algorithm, Limit, Policy};

/// The key names every file has without defining them.
const BUILT_IN_KEYS: [&str; 3] = ["ip", "endpoint", "global"];

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

/// A key as the file defines it: the crate's extractors, combined.
#[derive(Clone, Debug)]
pub(super) enum FileKey {
    Header(Header),
    ClientIp(ClientIp),
    ApiKey(ApiKey),
    Endpoint,
    Global,
    Or(Arc<FileKey>, Arc<FileKey>),
    All(Vec<Arc<FileKey>>),
}

impl FileKey {
    /// The key of `req`; `endpoint` stands for the endpoint when the key is
    /// asked for on another route than the request's.
    pub(super) fn extract(
        &self,
        req: &RequestHead<'_>,
        endpoint: Option<&str>,
    ) -> Result<Key, KeyError> {
        match self {
            Self::Header(h) => h.extract(req),
            Self::ClientIp(ip) => ip.extract(req),
            Self::ApiKey(api) => api.extract(req),
            Self::Endpoint => match endpoint {
                Some(endpoint) => Ok(Key::new("endpoint", endpoint)),
                #[cfg(feature = "axum")]
                None => crate::key::Endpoint.extract(req),
                // Without axum the route is the path (as the table finds it).
                #[cfg(not(feature = "axum"))]
                None => Ok(Key::new(
                    "endpoint",
                    format!(
                        "{} {}",
                        req.method,
                        crate::layer::rate_limit::select::route_of(req)
                    ),
                )),
            },
            Self::Global => crate::key::Global.extract(req),
            Self::Or(a, b) => a
                .extract(req, endpoint)
                .or_else(|_| b.extract(req, endpoint)),
            Self::All(parts) => {
                let keys = parts
                    .iter()
                    .map(|p| p.extract(req, endpoint))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Key::composite(&keys))
            }
        }
    }

    /// The keys this definition gives a client named by `value` (for
    /// overrides and lists): one for each alternative that can read it.
    fn keys_of(&self, value: &str) -> Result<Vec<Key>, String> {
        match self {
            Self::Header(h) => Ok(vec![h.key_of(value.as_bytes())]),
            Self::ClientIp(ip) => match value.parse::<IpAddr>() {
                Ok(addr) => Ok(vec![ip.key_of(addr)]),
                Err(_) => Err(format!("{value:?} is not an IP address")),
            },
            Self::ApiKey(api) => Ok(vec![api.key_of(value.as_bytes())]),
            Self::Or(a, b) => {
                let keys: Vec<Key> = [a, b]
                    .iter()
                    .filter_map(|k| k.keys_of(value).ok())
                    .flatten()
                    .collect();
                if keys.is_empty() {
                    a.keys_of(value)
                } else {
                    Ok(keys)
                }
            }
            Self::Endpoint | Self::Global | Self::All(_) => Err(
                "only a key read from one header, the client IP or an API key (or a choice of them) names a client by one value"
                    .to_owned(),
            ),
        }
    }
}

/// `[tier_of]`, built.
#[derive(Clone, Debug)]
pub(super) struct TierOf {
    header: Option<HeaderName>,
    values: HashMap<Vec<u8>, Arc<str>>,
    extension: bool,
    default: Option<Arc<str>>,
}

impl TierOf {
    /// The tier `req` is in, if any.
    pub(super) fn tier<'a>(&'a self, req: &'a RequestHead<'_>) -> Option<&'a str> {
        let from_extension = self
            .extension
            .then(|| req.extensions.get::<Tier>().map(Tier::name))
            .flatten();
        let from_header = || {
            let value = req.headers.get(self.header.as_ref()?)?.as_bytes();
            if self.values.is_empty() {
                std::str::from_utf8(value).ok()
            } else {
                self.values.get(value).map(|t| &**t)
            }
        };
        from_extension
            .or_else(from_header)
            .or(self.default.as_deref())
    }
}

/// Builds a file's settings from `spec`, its `text` giving errors their places.
pub(super) fn compile(
    spec: &FileSpec,
    text: &str,
    defaults: &FileDefaults,
) -> Result<Compiled, ConfigError> {
    Compiler { spec, text }.compile(defaults)
}

struct Compiler<'a> {
    spec: &'a FileSpec,
    text: &'a str,
}

impl Compiler<'_> {
    fn error<T>(&self, span: &Spanned<T>, message: impl Into<String>) -> ConfigError {
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

    fn client_ip(&self, defaults: &FileDefaults) -> Result<ClientIp, ConfigError> {
        let mut ip = ClientIp::new();
        let Some(spec) = &self.spec.client_ip else {
            if !defaults.trusted_proxies.is_empty() {
                ip = ip.trust_networks(defaults.trusted_proxies.iter().copied());
            }
            return Ok(ip);
        };
        if !spec.trusted_proxies.is_empty() {
            let networks = spec
                .trusted_proxies
                .iter()
                .map(|net| self.network(net))
                .collect::<Result<Vec<_>, _>>()?;
            ip = ip.trust_networks(networks);
        }
        if let Some(hops) = spec.trust_hops {
            ip = ip.trust_hops(hops);
        }
        if let Some(header) = &spec.header {
            ip = ip.header(match header.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => ForwardedHeader::XForwardedFor,
                "forwarded" => ForwardedHeader::Forwarded,
                "x-real-ip" => ForwardedHeader::XRealIp,
                other => {
                    return Err(self.error(
                        header,
                        format!(
                        "{other:?}: expected \"x-forwarded-for\", \"forwarded\" or \"x-real-ip\""
                    ),
                    ))
                }
            });
        }
        if let Some(prefix) = &spec.ipv6_prefix {
            if *prefix.get_ref() > 128 {
                return Err(self.error(prefix, "an IPv6 prefix is 0 to 128 bits"));
            }
            ip = ip.ipv6_prefix(*prefix.get_ref());
        }
        Ok(ip)
    }

    fn network(&self, text: &Spanned<String>) -> Result<IpNet, ConfigError> {
        let t = text.get_ref();
        t.parse::<IpNet>()
            .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| {
                self.error(
                    text,
                    format!("{t:?} is not a network (\"10.0.0.0/8\") or an address"),
                )
            })
    }

    /// Every key the file defines, and the built-in ones.
    fn keys(&self, client_ip: &ClientIp) -> Result<HashMap<String, Arc<FileKey>>, ConfigError> {
        let mut built: HashMap<String, Arc<FileKey>> = HashMap::from([
            (
                "ip".to_owned(),
                Arc::new(FileKey::ClientIp(client_ip.clone())),
            ),
            ("endpoint".to_owned(), Arc::new(FileKey::Endpoint)),
            ("global".to_owned(), Arc::new(FileKey::Global)),
        ]);
        for (name, spec) in &self.spec.keys {
            if BUILT_IN_KEYS.contains(&name.as_str()) {
                return Err(self.error(
                    spec,
                    format!("{name:?} is a built-in key: give yours another name"),
                ));
            }
        }
        let mut parts = HashMap::from(BUILT_IN_KEYS.map(|name| (name.to_owned(), 1)));
        for name in self.spec.keys.keys() {
            let mut visiting = Vec::new();
            self.key(name, &mut built, &mut parts, &mut visiting, client_ip)?;
        }
        Ok(built)
    }

    /// The key `name`, built after the keys it names (`visiting`, the
    /// keys being built, catches a cycle and bounds the depth; `parts`
    /// counts each built key's extractors).
    fn key(
        &self,
        name: &str,
        built: &mut HashMap<String, Arc<FileKey>>,
        parts: &mut HashMap<String, u32>,
        visiting: &mut Vec<String>,
        client_ip: &ClientIp,
    ) -> Result<Arc<FileKey>, ConfigError> {
        if let Some(key) = built.get(name) {
            return Ok(key.clone());
        }
        let Some(spanned) = self.spec.keys.get(name) else {
            return Err(ConfigError::at(
                self.text,
                None,
                format!(
                    "no key named {name:?}: define it under [keys], or use ip, endpoint or global"
                ),
            ));
        };
        if visiting.iter().any(|v| v == name) {
            return Err(self.error(spanned, format!("key {name:?} is defined by itself")));
        }
        if visiting.len() >= MAX_KEY_DEPTH {
            return Err(self.error(
                spanned,
                format!(
                    "key {name:?}: keys name keys (by or and all) more than {MAX_KEY_DEPTH} deep, from {:?}",
                    visiting[0]
                ),
            ));
        }
        visiting.push(name.to_owned());
        let spec: &KeySpec = spanned.get_ref();
        // Each key named, built, and its count of extractors.
        let mut named = 0u32;
        let mut refer = |other: &str| -> Result<Arc<FileKey>, ConfigError> {
            if !BUILT_IN_KEYS.contains(&other) && !self.spec.keys.contains_key(other) {
                return Err(self.error(
                    spanned,
                    format!("key {name:?} names {other:?}, which is not a key: define it under [keys], or use ip, endpoint or global"),
                ));
            }
            let key = self.key(other, built, parts, visiting, client_ip)?;
            named = named.saturating_add(parts.get(other).copied().unwrap_or(1));
            Ok(key)
        };
        let sources = [
            spec.header.is_some(),
            spec.api_key.is_some(),
            spec.client_ip,
            spec.endpoint,
            spec.global,
            spec.all.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(self.error(
                spanned,
                format!("key {name:?} needs exactly one of header, api_key, client_ip, endpoint, global or all"),
            ));
        }
        if spec.api_key.is_none() && (spec.secret_env.is_some()) {
            return Err(self.error(
                spanned,
                format!("key {name:?}: secret_env goes with api_key"),
            ));
        }
        let key = if let Some(header) = &spec.header {
            let name = self.header_name(spanned, header)?;
            FileKey::Header(Header::from_name(name))
        } else if let Some(header) = &spec.api_key {
            let Some(var) = &spec.secret_env else {
                return Err(self.error(
                    spanned,
                    format!("key {name:?}: an api_key needs secret_env, the environment variable holding the secret it is hashed under"),
                ));
            };
            let secret = std::env::var(var).map_err(|_| {
                self.error(
                    spanned,
                    format!("key {name:?}: the environment variable {var} (its secret) is not set"),
                )
            })?;
            if header.eq_ignore_ascii_case("bearer") {
                FileKey::ApiKey(ApiKey::bearer(secret))
            } else {
                FileKey::ApiKey(ApiKey::from_name(
                    self.header_name(spanned, header)?,
                    secret,
                ))
            }
        } else if spec.client_ip {
            FileKey::ClientIp(client_ip.clone())
        } else if spec.endpoint {
            FileKey::Endpoint
        } else if spec.global {
            FileKey::Global
        } else {
            let parts = spec.all.as_deref().unwrap_or_default();
            if parts.len() < 2 {
                return Err(self.error(
                    spanned,
                    format!("key {name:?}: all = [...] combines two keys or more"),
                ));
            }
            FileKey::All(parts.iter().map(|p| refer(p)).collect::<Result<_, _>>()?)
        };
        let key = Arc::new(match &spec.or {
            Some(other) => FileKey::Or(Arc::new(key), refer(other)?),
            None => key,
        });
        // An `all` counts its parts; a key read from the request counts one.
        let own = u32::from(spec.all.is_none());
        let count = named.saturating_add(own);
        if count > MAX_KEY_PARTS {
            return Err(self.error(
                spanned,
                format!("key {name:?} reads {count} keys from each request (through or and all); at most {MAX_KEY_PARTS}"),
            ));
        }
        visiting.pop();
        parts.insert(name.to_owned(), count);
        built.insert(name.to_owned(), key.clone());
        Ok(key)
    }

    fn header_name<T>(&self, at: &Spanned<T>, name: &str) -> Result<HeaderName, ConfigError> {
        HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map_err(|_| self.error(at, format!("{name:?} is not a header name")))
    }

    fn tier_of(&self) -> Result<Option<TierOf>, ConfigError> {
        let Some(spanned) = &self.spec.tier_of else {
            return Ok(None);
        };
        let spec = spanned.get_ref();
        if spec.header.is_none() && !spec.extension {
            return Err(self.error(spanned, "[tier_of] needs a header, or extension = true"));
        }
        if spec.header.is_none() && !spec.values.is_empty() {
            return Err(self.error(
                spanned,
                "[tier_of] values are a header's values: set header",
            ));
        }
        let known = |tier: &str| -> Result<Arc<str>, ConfigError> {
            if self.spec.tiers.contains_key(tier) {
                Ok(tier.into())
            } else {
                Err(self.error(
                    spanned,
                    format!("[tier_of] names the tier {tier:?}, which is not under [tiers]"),
                ))
            }
        };
        Ok(Some(TierOf {
            header: match &spec.header {
                Some(h) => Some(self.header_name(spanned, h)?),
                None => None,
            },
            values: spec
                .values
                .iter()
                .map(|(value, tier)| Ok((value.as_bytes().to_vec(), known(tier)?)))
                .collect::<Result<_, ConfigError>>()?,
            extension: spec.extension,
            default: spec.default.as_deref().map(known).transpose()?,
        }))
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
