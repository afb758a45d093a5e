//! [`Limits`]: the file a layer runs now, replaced at runtime.

use std::sync::Arc;

use super::compile::{FileRoute, RoutePolicy};
use super::LimitsFile;
use crate::key::{Key, KeyError, KeyExtractor};
use crate::layer::{AccessLists, KeyPolicies, PolicyResolver};
use crate::{key::RequestHead, Live, Policy, RateLimitLayer};

/// The limits file a layer runs now: its keys ([`FileKeys`]), policies
/// ([`FilePolicies`]), lists and per-key policies, each read lock-free on
/// every request and replaced together by [`apply`](Self::apply).
///
/// The failure rule (`on_store_failure`) and what happens to unmatched
/// requests (`unmatched`) are the layer's: they are read when
/// [`layer`](Self::layer) builds it, and a new version changes them only in
/// layers built after it.
#[derive(Clone, Debug)]
pub struct Limits {
    file: Live<LimitsFile>,
    lists: Live<AccessLists>,
    overrides: Live<KeyPolicies>,
}

impl Limits {
    /// Run `file`.
    pub fn new(file: LimitsFile) -> Self {
        Self {
            lists: Live::new(file.compiled.lists.clone()),
            overrides: Live::new(file.compiled.overrides.clone()),
            file: Live::new(file),
        }
    }

    /// The version running now.
    pub fn current(&self) -> Arc<LimitsFile> {
        self.file.current()
    }

    /// Run `file` from now on, for every layer built from this handle (its
    /// clones included); the old version is returned. Requests under way
    /// finish with what they read.
    pub fn apply(&self, file: LimitsFile) -> Arc<LimitsFile> {
        self.lists.replace(file.compiled.lists.clone());
        self.overrides.replace(file.compiled.overrides.clone());
        self.file.replace(file)
    }

    /// A layer keyed, limited and listed by the file: every route of it
    /// (by axum's route template and the method), its fallback, its
    /// per-key policies, its lists, its failure rule.
    pub fn layer(&self) -> RateLimitLayer<FileKeys, FilePolicies> {
        let file = self.current();
        RateLimitLayer::new(self.policies())
            .key(self.keys())
            .lists(self.lists.clone())
            .key_policies(self.overrides.clone())
            .on_backend_error(file.compiled.on_store_failure)
            .on_no_policy(file.compiled.unmatched)
    }

    /// The key of each request: its route's.
    pub fn keys(&self) -> FileKeys {
        FileKeys(self.file.clone())
    }

    /// The policy of each request: its route's, or its tier's on a tiered
    /// route.
    pub fn policies(&self) -> FilePolicies {
        FilePolicies(self.file.clone())
    }

    /// The lists, for a layer built by hand.
    pub fn lists(&self) -> Live<AccessLists> {
        self.lists.clone()
    }

    /// The per-key policies, for a layer built by hand.
    pub fn overrides(&self) -> Live<KeyPolicies> {
        self.overrides.clone()
    }
}

impl LimitsFile {
    /// The route `req` is on: its own, else the fallback.
    fn route_of(&self, req: &RequestHead<'_>) -> Option<&FileRoute> {
        self.compiled
            .routes
            .find(req)
            .or(self.compiled.fallback.as_ref())
            .map(|r| &**r)
    }
}

impl FileRoute {
    /// The policy of `req` on this route of `file`.
    pub(super) fn policy_for(&self, file: &LimitsFile, req: &RequestHead<'_>) -> Option<Policy> {
        match &self.policy {
            RoutePolicy::Fixed(policy) => Some(policy.clone()),
            RoutePolicy::Tiered(tiers) => tiers.get(file.tier(req)?).cloned(),
        }
    }
}

/// The key extractor of a [`Limits`]: each request's route's key.
#[derive(Clone, Debug)]
pub struct FileKeys(Live<LimitsFile>);

impl KeyExtractor for FileKeys {
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        match self.0.load().route_of(req) {
            Some(route) => route.key.extract(req, None),
            None => Err(KeyError::Missing("a route in the limits file")),
        }
    }
}

/// The policy resolver of a [`Limits`]: each request's route's policy.
#[derive(Clone, Debug)]
pub struct FilePolicies(Live<LimitsFile>);

impl PolicyResolver for FilePolicies {
    fn resolve(&self, req: &RequestHead<'_>) -> Option<Policy> {
        let file = self.0.load();
        file.route_of(req)?.policy_for(&file, req)
    }
}
