//! What every request of a layer shares: how to answer, what to do when no
//! key or no decision can be had, shaping.

use http::StatusCode;

use super::decide::Rules;
use super::lists::AccessLists;
use super::observe::Reporting;
use super::select::{KeyPolicies, NoPolicy};
use super::settle::Settlement;
use super::shaping::Shaping;
use super::soft_shed::SoftShed;
use crate::backend::OnBackendError;
use crate::layer::answer::headers::HeaderStyle;
use crate::layer::answer::response::LimitedResponse;
use crate::{clock::Micros, Live, Policy};

/// What to do with a request no key can be derived for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnKeyError {
    /// Answer with this status and a JSON body saying what is missing (the
    /// default: 400). Skipping instead would let a client escape the limit
    /// by leaving out its key.
    Reject(StatusCode),
    /// Pass the request on unlimited.
    Skip,
}

impl Default for OnKeyError {
    fn default() -> Self {
        Self::Reject(StatusCode::BAD_REQUEST)
    }
}

/// Shadow mode for a whole layer ([`RateLimitLayer::shadow`](crate::RateLimitLayer::shadow)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shadow {
    /// Enforce every policy that is not in shadow mode itself (the default).
    #[default]
    Off,
    /// A dry run: every request is decided, counted and reported, none is
    /// refused or delayed. Requests that would have been denied get no quota
    /// headers (clients that obey them would slow down for a limit that is
    /// not enforced); admitted ones get them as usual.
    DryRun,
    /// A dry run that also sends quota headers (and `Retry-After`) on the
    /// requests it would have denied, as an enforced limit would.
    DryRunWithHeaders,
}

/// Settings every request of a layer shares.
#[derive(Clone, Debug, Default)]
pub(super) struct Config {
    pub(super) headers: HeaderStyle,
    pub(super) limited: LimitedResponse,
    pub(super) on_key_error: OnKeyError,
    pub(super) on_backend_error: OnBackendError,
    pub(super) retry_jitter: Micros,
    pub(super) shaping: Option<Shaping>,
    /// The policy a key its penalty box banned lives by until the ban ends.
    pub(super) demotion: Option<Policy>,
    /// Delays admissions as a key nears its limit.
    pub(super) soft_shed: Option<SoftShed>,
    /// Settles each counted request by its response.
    pub(super) settlement: Option<Settlement>,
    /// Every policy in shadow mode, whatever it says.
    pub(super) shadow: Shadow,
    pub(super) lists: Option<Live<AccessLists>>,
    pub(super) key_policies: Option<Live<KeyPolicies>>,
    pub(super) on_no_policy: NoPolicy,
    /// Metrics, logs and offenders: what every request reports to.
    pub(super) observer: Reporting,
}

impl Config {
    /// The settings that decide what to do with an answered request.
    pub(super) fn rules(&self) -> Rules {
        Rules {
            on_backend_error: self.on_backend_error,
            shadow: self.shadow != Shadow::Off,
            shadow_headers: self.shadow == Shadow::DryRunWithHeaders,
        }
    }
}
