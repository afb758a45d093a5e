//! A shared capacity on Redis (`layer::fair_share`, feature `fair-share`):
//! its decision, one script call over the capacity's hash and its set of
//! active tenants (and, for a capacity in flight, its permits), all in one
//! slot.

use std::sync::OnceLock;

use ::redis::{ErrorKind, Script, ServerErrorKind};

use crate::algorithm::fair_flight::{FlightSettings, ASK_AGAIN_US};
use crate::algorithm::fair_share::{Ask, Settings, TenantId, Verdict, OVERFLOW};
use crate::backend::redis::link::Link;
use crate::backend::BackendError;

/// A script of `integers.lua` and `body`, made once in `cell`.
fn with_integers(cell: &'static OnceLock<Script>, body: &str) -> &'static Script {
    cell.get_or_init(|| Script::new(&[include_str!("../lua/integers.lua"), body].concat()))
}

fn fair_share_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    with_integers(&SCRIPT, include_str!("../lua/fair_share.lua"))
}

fn fair_flight_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    with_integers(&SCRIPT, include_str!("../lua/fair_flight.lua"))
}

/// A permit of a capacity in flight on Redis: its tenant and number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FlightPermit(String);

fn hex(id: &TenantId) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// `now` as a script argument: empty for Redis's own `TIME`.
fn at(now: Option<u64>) -> String {
    now.map_or_else(String::new, |now| now.to_string())
}

/// The shared capacities on a backend's [`Link`]
/// ([`RedisBackend::capacities`](crate::backend::RedisBackend::capacities)).
pub(crate) struct Capacities<'a>(pub(in crate::backend::redis) &'a Link);

impl Capacities<'_> {
    /// `script` called as `cmd` (an `EVALSHA` of it), loaded first if
    /// Redis does not have it, within the backend's timeout.
    async fn scripted(
        &self,
        script: &Script,
        cmd: &::redis::Cmd,
    ) -> Result<Vec<u64>, BackendError> {
        let call = async {
            match self.0.conn.query::<Vec<u64>>(cmd).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    self.0.conn.load(script).await?;
                    self.0.conn.query::<Vec<u64>>(cmd).await
                }
                reply => reply,
            }
        };
        self.0.answered(call).await
    }

    fn capacity_key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}{{{name}}}", self.0.names.prefix)
    }

    /// Decide `ask` on the capacity `name` (letters, digits, `_-.:`),
    /// within the backend's timeout, at `now` (µs: the conformance tests'
    /// clock) or, when `None`, Redis's own `TIME`.
    pub(crate) async fn fair_share(
        &self,
        name: &str,
        settings: &Settings,
        ask: &Ask,
        now: Option<u64>,
    ) -> Result<Verdict, BackendError> {
        // `fair7`: the state's layout since each tenant keeps what it
        // left of its share unused; a capacity's keys of the layouts
        // before are left to expire. (Its last field, once that amount
        // apart, is written 0 and not read; a time of arrival behind the
        // present reads as that amount to a server of the version before,
        // so both read each other's states.)
        let hash = self.capacity_key("fair7", name);
        let class = ask.class.min(2);
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(fair_share_script().get_hash())
            .arg(2)
            .arg(&hash)
            .arg(format!("{hash}:seen"))
            .arg(settings.interval)
            .arg(settings.active_for)
            .arg(settings.thresholds[class])
            .arg(settings.headroom)
            .arg(settings.max_tenants)
            .arg(settings.limit)
            .arg(settings.window)
            .arg(hex(&ask.tenant))
            .arg(ask.weight)
            .arg(u8::from(class == 0))
            .arg(settings.reserve_interval)
            .arg(settings.reserve_depth)
            .arg(at(now))
            .arg(settings.depth)
            .arg(u8::from(settings.trusted));
        let reply = self.scripted(fair_share_script(), &cmd).await?;
        let [admitted, share, retry_after, active] = reply[..] else {
            return Err(BackendError::new(format!(
                "the fair-share script answered {reply:?}"
            )));
        };
        Ok(Verdict {
            admitted: admitted == 1,
            share: u32::try_from(share).unwrap_or(u32::MAX),
            retry_after,
            active: u32::try_from(active).unwrap_or(u32::MAX),
        })
    }

    /// The command of the in-flight capacity `name`'s script, its keys
    /// given.
    fn fair_flight_cmd(&self, name: &str) -> ::redis::Cmd {
        let hash = self.capacity_key("flight", name);
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(fair_flight_script().get_hash())
            .arg(3)
            .arg(&hash)
            .arg(format!("{hash}:seen"))
            .arg(format!("{hash}:permits"));
        cmd
    }

    /// Decide `ask` on the in-flight capacity `name`, counting it in
    /// flight for at most `lease` µs if admitted (its permit comes back);
    /// `now`: Redis's `TIME` when `None`.
    pub(crate) async fn fair_flight_acquire(
        &self,
        name: &str,
        settings: &FlightSettings,
        ask: &Ask,
        lease: u64,
        now: Option<u64>,
    ) -> Result<(Verdict, Option<FlightPermit>), BackendError> {
        let mut cmd = self.fair_flight_cmd(name);
        cmd.arg("acquire")
            .arg(settings.thresholds[ask.class.min(2)])
            .arg(settings.active_for)
            .arg(settings.max_tenants)
            .arg(hex(&ask.tenant))
            .arg(ask.weight)
            .arg(lease)
            .arg(at(now));
        let reply = self.scripted(fair_flight_script(), &cmd).await?;
        let [admitted, share, active, permit, overflow] = reply[..] else {
            return Err(BackendError::new(format!(
                "the in-flight capacity's script answered {reply:?}"
            )));
        };
        let verdict = Verdict {
            admitted: admitted == 1,
            share: u32::try_from(share).unwrap_or(u32::MAX),
            retry_after: if admitted == 1 { 0 } else { ASK_AGAIN_US },
            active: u32::try_from(active).unwrap_or(u32::MAX),
        };
        // A tenant past the cap was counted as the overflow's.
        let tenant = if overflow == 1 { OVERFLOW } else { ask.tenant };
        let permit = (admitted == 1).then(|| FlightPermit(format!("{}:{permit}", hex(&tenant))));
        Ok((verdict, permit))
    }

    /// The permit `permit` of the capacity `name` ends.
    pub(crate) async fn fair_flight_release(
        &self,
        name: &str,
        settings: &FlightSettings,
        permit: &FlightPermit,
        lease: u64,
        now: Option<u64>,
    ) -> Result<(), BackendError> {
        let mut cmd = self.fair_flight_cmd(name);
        cmd.arg("release")
            .arg(&permit.0)
            .arg(settings.active_for)
            .arg(lease)
            .arg(at(now));
        self.scripted(fair_flight_script(), &cmd).await.map(drop)
    }
}
