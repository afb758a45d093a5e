//! The keys a limits file defines (`[keys]`, `client_ip`), `[tier_of]`,
//! and the tier it finds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderName;
use ipnet::IpNet;
use toml::Spanned;

use super::defaults::FileDefaults;
use super::error::ConfigError;
use super::schema::KeySpec;

use super::compile::{Compiler, BUILT_IN_KEYS, MAX_KEY_DEPTH, MAX_KEY_PARTS};
use crate::key::RequestHead;
use crate::key::{ApiKey, ClientIp, ForwardedHeader, Header, Key, KeyError, KeyExtractor};

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
    pub(super) fn keys_of(&self, value: &str) -> Result<Vec<Key>, String> {
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

impl Compiler<'_> {
    pub(super) fn client_ip(&self, defaults: &FileDefaults) -> Result<ClientIp, ConfigError> {
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

    pub(super) fn network(&self, text: &Spanned<String>) -> Result<IpNet, ConfigError> {
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
    pub(super) fn keys(
        &self,
        client_ip: &ClientIp,
    ) -> Result<HashMap<String, Arc<FileKey>>, ConfigError> {
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

    pub(super) fn tier_of(&self) -> Result<Option<TierOf>, ConfigError> {
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
}

/// The tier of a request, put in its extensions by an authentication layer
/// for a file whose `[tier_of]` says `extension = true`.
///
/// ```
/// use tower_ratelimit::config::Tier;
/// let mut req = http::Request::get("/").body(()).unwrap();
/// req.extensions_mut().insert(Tier::new("pro"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier(Arc<str>);

impl Tier {
    /// The tier named `name` under `[tiers]`.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }
}
