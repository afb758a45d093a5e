//! `LimitsFile`: one version of a limits file, read, checked and built;
//! and the changes made to it at run time.

use std::path::Path;
use std::sync::Arc;

use http::Method;
use ipnet::IpNet;
use sha2::{Digest, Sha256};

use super::compile::{Compiled, FileRoute, RoutePolicy};
use super::defaults::FileDefaults;
use super::disk;
use super::error::ConfigError;
use super::schema::{self, FileSpec, InFlightSpec, KeyValueSpec, OverrideSpec};
use crate::key::{Key, KeyError};
use crate::{key::RequestHead, Policy};

/// One version of a limits file: read, checked and built. See the
/// [module](super) for the format.
#[derive(Clone, Debug)]
pub struct LimitsFile {
    pub(super) spec: FileSpec,
    /// What applies where the file says nothing.
    pub(super) defaults: FileDefaults,
    pub(super) text: Arc<str>,
    pub(super) version: Arc<str>,
    pub(super) compiled: Compiled,
}

impl FileDefaults {
    /// The file in `text`.
    pub fn parse(&self, text: &str) -> Result<LimitsFile, ConfigError> {
        let spec: FileSpec = toml::from_str(text).map_err(|e| {
            let message = e.message().trim_end().to_owned();
            ConfigError::at(text, e.span().map(|s| s.start), message)
        })?;
        let compiled = super::compile::compile(&spec, text, self)?;
        let version = match &spec.version {
            Some(label) => label.as_str().into(),
            None => {
                let digest = Sha256::digest(text.as_bytes());
                let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
                format!("sha256:{hex}").into()
            }
        };
        Ok(LimitsFile {
            spec,
            defaults: self.clone(),
            text: text.into(),
            version,
            compiled,
        })
    }

    /// The file at `path`; an error names it. It must be a regular file
    /// (through any symlinks) of at most [`LimitsFile::MAX_BYTES`].
    pub fn read(&self, path: impl AsRef<Path>) -> Result<LimitsFile, ConfigError> {
        let path = path.as_ref();
        let text = disk::read_text(path)?;
        self.parse(&text).map_err(|e| e.in_file(path))
    }
}

/// A list of [`Limits`](super::Limits): clients refused (403) or never limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// `[lists] deny…`.
    Deny,
    /// `[lists] allow…`.
    Allow,
}

/// An entry of a [`List`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListEntry {
    /// A network (or one address, as a /32 or /128).
    Network(IpNet),
    /// The client `value` names under the file's key `key`.
    Key {
        /// A key's name under `[keys]`, or `ip`.
        key: String,
        /// The client: a header's value, an address, an API key.
        value: String,
    },
}

impl LimitsFile {
    /// The largest limits file read: 1 MiB, hundreds of times a large one.
    /// A bigger file (a log pointed at by mistake, `/dev/zero` behind a
    /// symlink) is refused without being read.
    pub const MAX_BYTES: u64 = disk::MAX_BYTES;

    /// The file in `text`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        FileDefaults::new().parse(text)
    }

    /// The file at `path`; an error names it.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        FileDefaults::new().read(path)
    }

    /// Another text read with this file's defaults: the file a new version
    /// of it is.
    pub(crate) fn reparse(&self, text: &str) -> Result<Self, ConfigError> {
        self.defaults.parse(text)
    }

    /// The file's `version` label, or `sha256:` and the first 12 hex digits
    /// of its text's hash.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The text it was read from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The policy the layer applies to `req` on `method` requests to
    /// `route` (its template): the route's, or on a tiered route `req`'s
    /// tier's; `None` for a route the file does not limit, or a request
    /// in no tier.
    pub fn policy(&self, method: &Method, route: &str, req: &RequestHead<'_>) -> Option<Policy> {
        self.route(method, route)?.policy_for(self, req)
    }

    /// The tier `req` is in (by `[tier_of]`), if any.
    pub fn tier<'a>(&'a self, req: &'a RequestHead<'_>) -> Option<&'a str> {
        self.compiled.tier_of.as_ref()?.tier(req)
    }

    /// The key `req` would be counted against on `method` requests to
    /// `route` (its endpoint is that route's): a request to one route
    /// asking about its budget on another.
    pub fn key_on(
        &self,
        method: &Method,
        route: &str,
        req: &RequestHead<'_>,
    ) -> Option<Result<Key, KeyError>> {
        let endpoint = format!("{method} {route}");
        Some(self.route(method, route)?.key.extract(req, Some(&endpoint)))
    }

    /// The routes, as `(method, path)`; `None` for every method.
    pub fn routes(&self) -> impl Iterator<Item = (Option<&str>, &str)> {
        self.spec.routes.iter().filter_map(|r| {
            let r = r.get_ref();
            Some((
                r.method.as_ref().map(|m| m.get_ref().as_str()),
                r.path.as_deref()?,
            ))
        })
    }

    /// The routes with a limit named `name` (for a tiered route, in any
    /// tier), as `(method, path)`: who counts against that budget's name
    /// already, before a change gives it to one more route.
    pub fn routes_with_limit(&self, name: &str) -> Vec<(Option<&str>, &str)> {
        let named = |policy: &Policy| {
            policy
                .limits()
                .iter()
                .any(|l| l.is_named() && l.name() == name)
        };
        self.routes()
            .filter(|(method, path)| {
                let method = method
                    .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
                    .unwrap_or(Method::GET);
                self.route(&method, path)
                    .is_some_and(|route| match &route.policy {
                        RoutePolicy::Fixed(policy) => named(policy),
                        RoutePolicy::Tiered(tiers) => tiers.values().any(named),
                    })
            })
            .collect()
    }

    fn route(&self, method: &Method, route: &str) -> Option<&FileRoute> {
        self.compiled.routes.get(method, route).map(|r| &**r)
    }

    /// This file with the limits of `method` requests to `path` (any
    /// method when `None`) replaced by `limits` (the quota syntax); an
    /// error when no such route is in the file, or the limits are invalid.
    pub fn with_route_limits(
        &self,
        method: Option<&Method>,
        path: &str,
        limits: &str,
    ) -> Result<Self, ConfigError> {
        self.edit(|spec| {
            let route = find_route(spec, method, path)?;
            route.limits = Some(toml::Spanned::new(0..0, limits.to_owned()));
            Ok(())
        })
    }

    /// This file with the route's limit of requests in flight set to
    /// `permits` (named after the route when it had none).
    pub fn with_route_in_flight(
        &self,
        method: Option<&Method>,
        path: &str,
        permits: u32,
    ) -> Result<Self, ConfigError> {
        self.edit(|spec| {
            let route = find_route(spec, method, path)?;
            let spec = match route.in_flight.take() {
                Some(old) => InFlightSpec {
                    permits,
                    ..old.into_inner()
                },
                None => InFlightSpec {
                    name: path.trim_matches('/').replace('/', "-"),
                    permits,
                    lease: None,
                },
            };
            route.in_flight = Some(toml::Spanned::new(0..0, spec));
            Ok(())
        })
    }

    /// This file with the client `value` names under the key `key` given
    /// its own `limits` on every route, or back to its route's (`None`).
    pub fn with_override(
        &self,
        key: &str,
        value: &str,
        limits: Option<&str>,
    ) -> Result<Self, ConfigError> {
        self.edit(|spec| {
            spec.overrides
                .retain(|o| (o.get_ref().key.as_str(), o.get_ref().value.as_str()) != (key, value));
            if let Some(limits) = limits {
                spec.overrides.push(toml::Spanned::new(
                    0..0,
                    OverrideSpec {
                        key: key.to_owned(),
                        value: value.to_owned(),
                        limits: toml::Spanned::new(0..0, limits.to_owned()),
                    },
                ));
            }
            Ok(())
        })
    }

    /// This file with `entry` on `list` (`listed`), or off it.
    pub fn with_listed(
        &self,
        list: List,
        entry: &ListEntry,
        listed: bool,
    ) -> Result<Self, ConfigError> {
        self.edit(|spec| {
            let lists = spec.lists.get_or_insert_with(Default::default);
            match entry {
                ListEntry::Network(net) => {
                    let nets = match list {
                        List::Deny => &mut lists.deny_networks,
                        List::Allow => &mut lists.allow_networks,
                    };
                    let text = net.to_string();
                    nets.retain(|n| {
                        n.get_ref().parse::<IpNet>().ok() != Some(*net) && *n.get_ref() != text
                    });
                    if listed {
                        nets.push(toml::Spanned::new(0..0, text));
                    }
                }
                ListEntry::Key { key, value } => {
                    let keys = match list {
                        List::Deny => &mut lists.deny,
                        List::Allow => &mut lists.allow,
                    };
                    let entry = KeyValueSpec {
                        key: key.clone(),
                        value: value.clone(),
                    };
                    keys.retain(|k| *k.get_ref() != entry);
                    if listed {
                        keys.push(toml::Spanned::new(0..0, entry));
                    }
                }
            }
            Ok(())
        })
    }

    /// This file changed by `change`, written out and read again (so that
    /// every check runs on it, and errors point into its new text). The
    /// edited file's version is its text's hash.
    fn edit(
        &self,
        change: impl FnOnce(&mut FileSpec) -> Result<(), String>,
    ) -> Result<Self, ConfigError> {
        let mut spec = self.spec.clone();
        change(&mut spec).map_err(ConfigError::from_message)?;
        spec.version = None;
        let text = toml::to_string(&spec).map_err(|e| ConfigError::from_message(e.to_string()))?;
        self.reparse(&text)
    }
}

fn find_route<'a>(
    spec: &'a mut FileSpec,
    method: Option<&Method>,
    path: &str,
) -> Result<&'a mut schema::RouteSpec, String> {
    spec.routes
        .iter_mut()
        .map(|r| r.get_mut())
        .find(|r| {
            let same_method = match (&r.method, method) {
                (None, None) => true,
                (Some(m), Some(method)) => m.get_ref().eq_ignore_ascii_case(method.as_str()),
                _ => false,
            };
            r.path.as_deref() == Some(path) && same_method
        })
        .ok_or_else(|| match method {
            Some(method) => format!("no route {method} {path} in the limits file"),
            None => format!("no route {path} (for every method) in the limits file"),
        })
}
