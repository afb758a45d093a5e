//! The penalty box: a client denied too often is banned for a while.

use std::fmt;
use std::time::Duration;

use crate::clock::Micros;

/// Ban a key denied `strikes` times within a window.
///
/// A [`PenaltyBox`] belongs to a [`Policy`](crate::Policy)
/// ([`PolicyBuilder::penalty`](crate::policy::PolicyBuilder::penalty)); the backend
/// applies it in the same atomic step as the policy's limits, so bans hold
/// across servers that share a backend (Redis). The rule, exactly:
///
/// * a **strike** is a request of cost > 0 the policy's limits deny;
/// * the first strike opens a strike window of `within`; the `strikes`-th
///   strike inside it **bans** the key (and closes the window);
/// * a ban lasts `ban`, doubled for each earlier ban still remembered, at
///   most `max_ban`; a ban is remembered until `max_ban` after it ends;
/// * while banned, every request of the key under this policy is denied
///   with a retry-after of the ban's remaining time, without looking at the
///   limits (and strikes are not counted).
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::backend::MemoryBackend;
/// use tower_ratelimit::clock::ManualClock;
/// use tower_ratelimit::key::Key;
/// use tower_ratelimit::Policy;
/// use tower_ratelimit::clock::Micros;
/// use tower_ratelimit::policy::PenaltyBox;
///
/// // 2 per minute; denied 3 times within a minute: banned 5 minutes, doubling, at most 1 hour.
/// let penalty = PenaltyBox::new(3, Duration::from_secs(60), Duration::from_secs(300))?
///     .max_ban(Duration::from_secs(3600))?;
/// let policy = "2/min".parse::<Policy>()?.to_builder().penalty(penalty).build().unwrap();
///
/// let clock = ManualClock::new(Micros::ZERO);
/// let backend = MemoryBackend::builder().clock(clock.clone()).build();
/// let client = Key::new("ip", "198.51.100.7");
/// let decisions: Vec<_> = (0..6).map(|_| backend.check_now(&client, &policy, 1)).collect();
/// assert!(decisions[1].is_allowed() && !decisions[2].is_allowed());
/// assert!(decisions[4].is_banned()); // the third denial
/// assert_eq!(decisions[5].retry_after(), Some(Duration::from_secs(300)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PenaltyBox {
    strikes: u32,
    within: Micros,
    ban: Micros,
    max_ban: Micros,
}

/// The longest a ban, or a strike window, may be: 30 days.
const MAX_SPAN: Micros = Micros::from_secs(30 * 24 * 3600);

impl PenaltyBox {
    /// Ban for `ban` a key denied `strikes` times within `within`. Repeat
    /// bans last as long as the first until [`max_ban`](Self::max_ban) says
    /// how far they may double.
    pub fn new(strikes: u32, within: Duration, ban: Duration) -> Result<Self, PenaltyError> {
        if strikes == 0 {
            return Err(PenaltyError::NoStrikes);
        }
        let within = span("strike window", within)?;
        let ban = span("ban", ban)?;
        Ok(Self {
            strikes,
            within,
            ban,
            max_ban: ban,
        })
    }

    /// Double each repeat ban, up to `max_ban` (at least the first ban).
    pub fn max_ban(self, max_ban: Duration) -> Result<Self, PenaltyError> {
        let max_ban = span("maximum ban", max_ban)?;
        if max_ban < self.ban {
            return Err(PenaltyError::MaxBelowBan);
        }
        Ok(Self { max_ban, ..self })
    }

    /// Strikes that ban.
    pub fn strikes(&self) -> u32 {
        self.strikes
    }

    /// The strike window, opened by the first strike.
    pub fn within(&self) -> Duration {
        self.within.into()
    }

    /// The first ban's length.
    pub fn ban(&self) -> Duration {
        self.ban.into()
    }

    /// The longest ban; also how long a ban is remembered after it ends.
    pub fn longest_ban(&self) -> Duration {
        self.max_ban.into()
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn within_micros(&self) -> Micros {
        self.within
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn ban_micros(&self) -> Micros {
        self.ban
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn max_ban_micros(&self) -> Micros {
        self.max_ban
    }

    /// How long the `level`-th ban in a row lasts (level 1 is the first).
    pub(crate) fn ban_for(&self, level: u64) -> Micros {
        let doublings = level.saturating_sub(1).min(63) as u32;
        let ban = self.ban.as_u64().saturating_mul(1 << doublings);
        Micros::new(ban.min(self.max_ban.as_u64()))
    }

    /// `strikes/within:ban..max_ban`: part of the identity of a penalty
    /// box's state.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{}/{}:{}..{}",
            self.strikes,
            self.within.as_u64(),
            self.ban.as_u64(),
            self.max_ban.as_u64()
        )
    }
}

fn span(what: &'static str, span: Duration) -> Result<Micros, PenaltyError> {
    let micros = Micros::from(span);
    if micros < Micros::from_millis(1) || micros > MAX_SPAN {
        return Err(PenaltyError::Span(what));
    }
    Ok(micros)
}

/// What a backend keeps for a penalty box, per key: two states in the
/// shape of an algorithm's ([`State`](crate::algorithm::State)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PenaltyState {
    /// `expires_at`: the strike window's end; `value`: strikes in it.
    pub(crate) strikes: crate::algorithm::State,
    /// `expires_at`: when the last ban is forgotten (its end + `max_ban`);
    /// `value`: bans in a row.
    pub(crate) bans: crate::algorithm::State,
}

impl PenaltyState {
    /// When the ban in force ends, if one is.
    pub(crate) fn banned_until(&self, penalty: &PenaltyBox, now: Micros) -> Option<Micros> {
        if self.bans.is_expired(now) {
            return None;
        }
        let until = self.bans.expires_at.saturating_sub(penalty.max_ban);
        (until > now).then_some(until)
    }

    /// Count a strike at `now`; the length of the ban it starts, if any.
    pub(crate) fn strike(&mut self, penalty: &PenaltyBox, now: Micros) -> Option<Micros> {
        if self.strikes.is_expired(now) {
            self.strikes.expires_at = now + penalty.within;
            self.strikes.value = 0;
        }
        self.strikes.value += 1;
        if self.strikes.value < u64::from(penalty.strikes) {
            return None;
        }
        self.strikes = Default::default();
        let level = if self.bans.is_expired(now) {
            1
        } else {
            self.bans.value + 1
        };
        let ban = penalty.ban_for(level);
        self.bans.value = level;
        self.bans.expires_at = now + ban + penalty.max_ban;
        Some(ban)
    }
}

/// Why a penalty box was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PenaltyError {
    /// Zero strikes would ban every client at its first request.
    NoStrikes,
    /// A span below a millisecond or above 30 days.
    Span(&'static str),
    /// The maximum ban is shorter than the first ban.
    MaxBelowBan,
}

impl fmt::Display for PenaltyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoStrikes => f.write_str("invalid penalty box: it needs at least one strike"),
            Self::Span(what) => write!(
                f,
                "invalid penalty box: the {what} must be from 1 ms to 30 days"
            ),
            Self::MaxBelowBan => {
                f.write_str("invalid penalty box: the maximum ban is shorter than the first ban")
            }
        }
    }
}

impl std::error::Error for PenaltyError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Micros {
        Micros::from_secs(secs)
    }

    #[test]
    fn bans_on_the_nth_strike_within_the_window_and_doubles_up_to_the_maximum() {
        let penalty = PenaltyBox::new(3, Duration::from_secs(60), Duration::from_secs(300))
            .unwrap()
            .max_ban(Duration::from_secs(1000))
            .unwrap();
        let mut state = PenaltyState::default();
        // Two strikes, then the window closes: no ban.
        assert_eq!(state.strike(&penalty, at(0)), None);
        assert_eq!(state.strike(&penalty, at(59)), None);
        assert_eq!(state.strike(&penalty, at(60)), None);
        assert_eq!(state.strike(&penalty, at(61)), None);
        assert_eq!(state.strike(&penalty, at(62)), Some(at(300)));
        assert_eq!(state.banned_until(&penalty, at(100)), Some(at(362)));
        assert_eq!(state.banned_until(&penalty, at(362)), None);
        // Again within max_ban of the end: doubled, then capped.
        for t in [400, 401] {
            assert_eq!(state.strike(&penalty, at(t)), None);
        }
        assert_eq!(state.strike(&penalty, at(402)), Some(at(600)));
        for t in [1100, 1101] {
            assert_eq!(state.strike(&penalty, at(t)), None);
        }
        assert_eq!(state.strike(&penalty, at(1102)), Some(at(1000)));
        // Forgotten max_ban after the end: back to the first length.
        let end = 1102 + 1000;
        for t in [end + 1000, end + 1001] {
            assert_eq!(state.strike(&penalty, at(t)), None);
        }
        assert_eq!(state.strike(&penalty, at(end + 1002)), Some(at(300)));
    }

    #[test]
    fn rejects_what_cannot_work() {
        let s = Duration::from_secs(1);
        assert_eq!(PenaltyBox::new(0, s, s), Err(PenaltyError::NoStrikes));
        assert!(PenaltyBox::new(1, Duration::ZERO, s)
            .unwrap_err()
            .to_string()
            .contains("strike window"));
        assert_eq!(
            PenaltyBox::new(1, s, 2 * s).unwrap().max_ban(s),
            Err(PenaltyError::MaxBelowBan)
        );
    }
}
