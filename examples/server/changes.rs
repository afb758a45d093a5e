//! Where a change of the limits is made: this server's own, or the fleet's
//! on Redis, joined in the background; and resets told to every server.

use super::*;

/// Where a change of the limits (`PUT /admin/limits/…`, an edit of
/// `LIMITS_FILE`) is made.
#[derive(Clone, Debug)]
pub enum Changes {
    /// This server's limits only.
    Local,
    /// Every server's on the Redis: stored there and published, once this
    /// server has joined the fleet (in the background: start-up waits for
    /// it half a second at most).
    #[cfg(feature = "redis")]
    Fleet(Arc<Joining>),
}

/// The fleet a server joins in the background, and how long a change may
/// take.
#[cfg(feature = "redis")]
pub struct Joining {
    fleet: OnceLock<tower_ratelimit::config::Fleet>,
    joined: tokio::sync::Notify,
    timeout: Duration,
    /// What this server forgets of a key another server reset.
    forget_local: OnceLock<ForgetLocal>,
}

#[cfg(feature = "redis")]
impl std::fmt::Debug for Joining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joining")
            .field("fleet", &self.fleet.get())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Forget what this server remembers of a key (its denials, leases, local
/// fallback) on every limited route.
#[cfg(feature = "redis")]
type ForgetLocal = Box<dyn Fn(&Key) + Send + Sync>;

/// Why a change of the limits was not made.
#[derive(Debug)]
pub enum ChangeError {
    /// The change itself is invalid (400).
    Invalid(ConfigError),
    /// The fleet's Redis cannot take it now (503).
    Unavailable(String),
}

impl Changes {
    /// On Redis, the fleet of every server on it (one server, a cluster,
    /// Sentinel; with the TLS settings of decisions), joined by a task that
    /// tries until Redis answers. Returns at once.
    #[cfg(feature = "redis")]
    pub fn for_redis(config: &Config, url: &str, limits: &Limits) -> Result<Self, String> {
        use tower_ratelimit::backend::RedisBackend;
        use tower_ratelimit::config::Fleet;
        let redis = with_tls(config, RedisBackend::builder(url))?;
        let joining = Arc::new(Joining {
            fleet: OnceLock::new(),
            joined: tokio::sync::Notify::new(),
            // A change waits for the replicas to confirm it: longer than a
            // decision may take, short enough for a caller waiting on it.
            timeout: config.store_timeout.max(Duration::from_millis(750)),
            forget_local: OnceLock::new(),
        });
        let (limits, task) = (limits.clone(), joining.clone());
        tokio::spawn(async move {
            let mut said = None;
            loop {
                let attempt = Fleet::join(redis.clone(), Fleet::DEFAULT_NAME, limits.clone());
                let error = match tokio::time::timeout(Duration::from_secs(2), attempt).await {
                    Ok(Ok(fleet)) => {
                        let on = match fleet.topology() {
                            "cluster" => "a Redis Cluster",
                            "sentinel" => "the master Sentinel names",
                            _ => "one Redis server",
                        };
                        let said = format!(
                            "limits: joined the fleet (version {}) on {on}: changes reach every server",
                            fleet.version()
                        );
                        let hooks = task.clone();
                        fleet.on_forget(move |key| {
                            if let Some(forget) = hooks.forget_local.get() {
                                forget(key);
                            }
                        });
                        let _ = task.fleet.set(fleet);
                        task.joined.notify_waiters();
                        // Said once changes can be made: a caller reading
                        // it and changing limits at once must not be told
                        // the fleet has not answered.
                        println!("{said}");
                        return;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "the fleet's Redis: no answer within 2s".to_owned(),
                };
                if said.as_ref() != Some(&error) {
                    println!(
                        "limits: not joined yet, changes refused until Redis answers: {error}"
                    );
                    said = Some(error);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Ok(Self::Fleet(joining))
    }

    /// Once the fleet is joined (at most `within`): for a caller that
    /// needs it now. Whether it is.
    pub async fn joined(&self, within: Duration) -> bool {
        match self {
            Self::Local => {
                let _ = within;
                true
            }
            #[cfg(feature = "redis")]
            Self::Fleet(joining) => {
                let wait = async {
                    loop {
                        let notified = joining.joined.notified();
                        if joining.fleet.get().is_some() {
                            return;
                        }
                        notified.await;
                    }
                };
                tokio::time::timeout(within, wait).await.is_ok()
            }
        }
    }

    /// Make `change` to the limits running now; the version it made. On a
    /// fleet, bounded by the store timeout: a Redis that is down or not
    /// joined yet is an [`Unavailable`](ChangeError::Unavailable) at once.
    pub(crate) async fn make(
        &self,
        limits: &Limits,
        change: impl Fn(&LimitsFile) -> Result<LimitsFile, ConfigError>,
    ) -> Result<Arc<LimitsFile>, ChangeError> {
        match self {
            Self::Local => {
                let file = change(&limits.current()).map_err(ChangeError::Invalid)?;
                limits.apply(file);
                Ok(limits.current())
            }
            #[cfg(feature = "redis")]
            Self::Fleet(joining) => {
                let Some(fleet) = joining.fleet.get() else {
                    let text = "the fleet's Redis has not answered yet: limits cannot change";
                    return Err(ChangeError::Unavailable(text.into()));
                };
                // The change's own mistakes are the caller's (400); anything
                // else the fleet says is Redis's (503).
                let invalid = std::sync::Mutex::new(None);
                let checked = |file: &LimitsFile| {
                    change(file).inspect_err(|e| {
                        *invalid.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone())
                    })
                };
                let made = tokio::time::timeout(joining.timeout, fleet.change(checked)).await;
                let invalid = invalid.into_inner().unwrap_or_else(|p| p.into_inner());
                match (made, invalid) {
                    (Ok(Ok(file)), _) => Ok(file),
                    (_, Some(error)) => Err(ChangeError::Invalid(error)),
                    (Ok(Err(error)), None) => Err(ChangeError::Unavailable(error.to_string())),
                    (Err(_), None) => Err(ChangeError::Unavailable(format!(
                        "the fleet's Redis did not answer within {:?}",
                        joining.timeout
                    ))),
                }
            }
        }
    }

    /// Tell every server of the fleet that `key` was reset in Redis, so
    /// that none goes on refusing it from what it remembers (nothing to do
    /// on one server's own limits).
    pub(crate) async fn forget_everywhere(&self, key: &Key) -> Result<(), String> {
        match self {
            Self::Local => {
                let _ = key;
                Ok(())
            }
            #[cfg(feature = "redis")]
            Self::Fleet(joining) => match joining.fleet.get() {
                Some(fleet) => {
                    let told = tokio::time::timeout(joining.timeout, fleet.forget(key)).await;
                    told.map_err(|_| "the fleet's Redis did not answer".to_owned())?
                        .map_err(|e| e.to_string())
                }
                None => Err("the fleet's Redis has not answered yet".into()),
            },
        }
    }

    /// Forget keys other servers reset, on `backend`, under each limited
    /// route's policy in `limits`.
    pub(crate) fn forget_on<B: Backend>(&self, backend: &B, limits: &Limits) {
        #[cfg(feature = "redis")]
        if let Self::Fleet(joining) = self {
            let (backend, limits) = (backend.clone(), limits.clone());
            let _ = joining.forget_local.set(Box::new(move |key| {
                let request = admin::nobody();
                let head = RequestHead::from(&request);
                let file = limits.current();
                for route in &ROUTES {
                    if let Some(policy) = file.policy(&route.method, route.path, &head) {
                        backend.forget_local(key, &policy);
                    }
                }
            }));
        }
        let _ = (backend, limits);
    }

    /// Watch the file at `path`: each valid edit runs (on every server of a
    /// fleet, once joined; on this one until then), each invalid one is
    /// refused; both are printed.
    pub fn watch(&self, limits: &Limits, path: &std::path::Path) {
        fn print(reload: Reload<'_>) {
            match reload {
                Reload::Applied(file) => println!("limits: version {} live", file.version()),
                Reload::Refused(error) => {
                    println!("limits: refused, the running version stays: {error}")
                }
                _ => {}
            }
        }
        let local = limits.watch(path, print);
        match self {
            Self::Local => drop(local),
            #[cfg(feature = "redis")]
            Self::Fleet(joining) => {
                let (changes, path) = (self.clone(), path.to_owned());
                let joining = joining.clone();
                tokio::spawn(async move {
                    while !changes.joined(Duration::from_secs(3600)).await {}
                    local.abort();
                    if let Some(fleet) = joining.fleet.get() {
                        drop(fleet.watch(path, print));
                    }
                });
            }
        }
    }
}
