//! The limits file's format, as serde reads it: every table refuses keys it
//! does not know, and every value a mistake could hide in keeps its place
//! in the text (`Spanned`) so that an error can point at it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSpec {
    /// A label for this version of the file; a hash of its text otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) version: Option<String>,
    /// The algorithm of every limit without one of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) algorithm: Option<Spanned<String>>,
    /// Every policy in shadow mode.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) shadow: bool,
    /// `allow` or `deny`: what happens while the store cannot decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) on_store_failure: Option<Spanned<String>>,
    /// `unlimited` or `refuse`: requests no route (and no fallback) matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) unmatched: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) client_ip: Option<ClientIpSpec>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) keys: BTreeMap<String, Spanned<KeySpec>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) tiers: BTreeMap<String, Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tier_of: Option<Spanned<TierOfSpec>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) routes: Vec<Spanned<RouteSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) fallback: Option<Spanned<RouteSpec>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) overrides: Vec<Spanned<OverrideSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) lists: Option<ListsSpec>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `[client_ip]`: how the client's address is found behind proxies.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClientIpSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) trusted_proxies: Vec<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) trust_hops: Option<usize>,
    /// `x-forwarded-for` (default), `forwarded` or `x-real-ip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) header: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) ipv6_prefix: Option<Spanned<u8>>,
}

/// `[keys.NAME]`: exactly one source, and optionally another key to use
/// when it finds none.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) header: Option<String>,
    /// The header holding an API key, or `bearer` for `Authorization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) api_key: Option<String>,
    /// The environment variable holding the API keys' HMAC secret (never
    /// the secret itself: files get committed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) secret_env: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) client_ip: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) endpoint: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) global: bool,
    /// A composite of other keys, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) all: Option<Vec<String>>,
    /// The key, by name, used when this one finds none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) or: Option<String>,
}

/// `[tier_of]`: which tier a request is in.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TierOfSpec {
    /// The header whose value names the tier (through `values`, if given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) header: Option<String>,
    /// Header values and the tiers they name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) values: BTreeMap<String, String>,
    /// The tier an authentication layer put in the request's extensions
    /// ([`Tier`](super::Tier)).
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) extension: bool,
    /// The tier of a request in none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) default: Option<String>,
}

/// `[[routes]]` (and `[fallback]`, without `path` and `method`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RouteSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) method: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) path: Option<String>,
    /// The key, by name (default `ip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key: Option<Spanned<String>>,
    /// Limits in the quota syntax: `"10/min"`, `"burst = 10/s; 100/min"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) limits: Option<Spanned<String>>,
    /// The policy is the request's tier's.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) tiered: bool,
    /// A limit of requests in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) in_flight: Option<Spanned<InFlightSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) algorithm: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) shadow: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(super) count_denied: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) penalty: Option<Spanned<PenaltySpec>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InFlightSpec {
    pub(super) name: String,
    pub(super) permits: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) lease: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PenaltySpec {
    pub(super) strikes: u32,
    pub(super) within: String,
    pub(super) ban: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) max_ban: Option<String>,
}

/// `[[overrides]]`: one key's own policy.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OverrideSpec {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) limits: Spanned<String>,
}

/// `[lists]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListsSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) deny_networks: Vec<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) allow_networks: Vec<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) deny: Vec<Spanned<KeyValueSpec>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) allow: Vec<Spanned<KeyValueSpec>>,
}

/// A key by its definition's name and a value: `{ key = "user", value = "alice" }`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyValueSpec {
    pub(super) key: String,
    pub(super) value: String,
}
