//! What one decision sends to Redis and reads back: the script, its keys
//! and arguments, and the decision in its reply.

use ::redis::Value;
use sha2::{Digest, Sha256};

use crate::algorithm::{FixedRule, Form};
use crate::backend::BackendError;
use crate::key::Key;
use crate::{Decision, Limit, Micros, Outcome, Policy, MAX_LIMITS};

/// Which parts a policy's script is made of. Each policy gets a script of
/// only the algorithms it uses (and the penalty box if it has one): Lua
/// creates every function a script defines on every call, so the parts a
/// policy does not use would cost it on each decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape(u8);

impl Shape {
    const FIXED_WINDOW: u8 = 1;
    const GCRA: u8 = 2;
    const SLIDING_WINDOW: u8 = 4;
    const LOG: u8 = 8;
    const PENALTY: u8 = 16;
    /// How many shapes there are.
    pub(super) const COUNT: usize = 32;

    pub(super) fn of(policy: &Policy) -> Self {
        let mut bits = 0;
        for limit in policy.limits() {
            bits |= match limit.rule().form() {
                Form::Fixed(FixedRule::FixedWindow(_)) => Self::FIXED_WINDOW,
                Form::Fixed(FixedRule::Gcra(_)) => Self::GCRA,
                Form::Fixed(FixedRule::SlidingWindow(_)) => Self::SLIDING_WINDOW,
                Form::Log(_) => Self::LOG,
            };
        }
        if policy.penalty().is_some() {
            bits |= Self::PENALTY;
        }
        Self(bits)
    }

    /// Its index among the [`COUNT`](Self::COUNT) shapes.
    pub(super) fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The script's text: the helpers, the parts, then the driver.
    pub(super) fn source(self) -> String {
        let has = |bit: u8| self.0 & bit != 0;
        let parts = [
            (true, include_str!("lua/common.lua")),
            (has(Self::SLIDING_WINDOW), include_str!("lua/exact.lua")),
            (
                has(Self::FIXED_WINDOW),
                include_str!("lua/fixed_window.lua"),
            ),
            (has(Self::GCRA), include_str!("lua/gcra.lua")),
            (
                has(Self::SLIDING_WINDOW),
                include_str!("lua/sliding_window.lua"),
            ),
            (has(Self::LOG), include_str!("lua/sliding_log.lua")),
            (has(Self::PENALTY), include_str!("lua/penalty.lua")),
            (true, include_str!("lua/check.lua")),
        ];
        parts
            .iter()
            .filter(|(used, _)| *used)
            .map(|(_, text)| *text)
            .collect()
    }
}

/// Identities up to this many bytes appear in keys as hex; longer ones as
/// a hash, so keys stay short whatever a client sends.
const MAX_HEX_IDENTITY: usize = 64;

/// The identity part of a Redis key: hex of the key's bytes, or a hash.
pub(super) fn identity(key: &Key) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hex = |bytes: &[u8], out: &mut String| {
        for &b in bytes {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    };
    let bytes = key.as_bytes();
    let mut out = String::with_capacity(2 * MAX_HEX_IDENTITY + 1);
    if bytes.len() <= MAX_HEX_IDENTITY {
        hex(bytes, &mut out);
    } else {
        // "h" cannot begin a hex encoding, so the two forms never meet.
        out.push('h');
        hex(&Sha256::digest(bytes)[..16], &mut out);
    }
    out
}

/// Append the keys of `identity` under `limit`:
/// `{prefix}{<identity>}:<limit identity>`, and for a sliding log its two.
pub(super) fn push_keys(keys: &mut Vec<String>, prefix: &str, identity: &str, limit: &Limit) {
    let base = [prefix, "{", identity, "}:", limit.identity()].concat();
    if let Form::Log(_) = limit.rule().form() {
        keys.push(format!("{base}:log"));
        keys.push(format!("{base}:sum"));
    } else {
        keys.push(base);
    }
}

/// What the script is asked.
#[derive(Clone, Copy, Debug)]
pub(super) enum Ask {
    /// Decide a request of this cost.
    Check(u32),
    /// Correct a request admitted at `reserved` to `actual`.
    Settle { reserved: u32, actual: u32 },
    /// Give back the permit taken at `permit`, of `cost`.
    Release { permit: Micros, cost: u32 },
    /// Renew it.
    Renew { permit: Micros, cost: u32 },
    /// Decide a request of `cost` taking a lease of `want` units (or only
    /// `cost` when `want` does not fit), giving `back` units back first.
    Lease { cost: u32, want: u32, back: u32 },
}

/// The script's keys and arguments for one decision.
pub(super) fn invocation(
    prefix: &str,
    key: &Key,
    policy: &Policy,
    ask: Ask,
    now: Option<Micros>,
) -> (Vec<String>, Vec<String>) {
    let mut keys = Vec::with_capacity(policy.limits().len() + 2);
    let (cost, mode) = match ask {
        Ask::Check(cost) => (
            i64::from(cost),
            u8::from(policy.counts_denied()).to_string(),
        ),
        Ask::Settle { reserved, actual } => (i64::from(actual) - i64::from(reserved), "s".into()),
        Ask::Release { permit, cost } => (i64::from(cost), format!("r{}", permit.as_u64())),
        Ask::Renew { permit, cost } => (i64::from(cost), format!("n{}", permit.as_u64())),
        Ask::Lease { cost, want, back } => (i64::from(cost), format!("l{want}:{back}")),
    };
    let mut args = vec![
        now.map_or_else(String::new, |n| n.as_u64().to_string()),
        cost.to_string(),
        mode,
    ];
    match policy.penalty() {
        Some(penalty) => args.extend(
            [
                u64::from(penalty.strikes()),
                penalty.within_micros().as_u64(),
                penalty.ban_micros().as_u64(),
                penalty.max_ban_micros().as_u64(),
            ]
            .map(|n| n.to_string()),
        ),
        None => args.extend(["0", "0", "0", "0"].map(String::from)),
    }
    let identity = identity(key);
    for limit in policy.limits() {
        // The algorithm codes of check.lua.
        let (code, interval) = match limit.rule().form() {
            Form::Fixed(FixedRule::FixedWindow(_)) => (1, Micros::ZERO),
            Form::Log(_) if limit.is_concurrent() => (5, Micros::ZERO),
            Form::Log(_) => (2, Micros::ZERO),
            Form::Fixed(FixedRule::SlidingWindow(_)) => (3, Micros::ZERO),
            Form::Fixed(FixedRule::Gcra(gcra)) => (4, gcra.interval()),
        };
        push_keys(&mut keys, prefix, &identity, limit);
        args.push(code.to_string());
        args.push(limit.capacity().to_string());
        args.push(limit.quota().window_micros().as_u64().to_string());
        args.push(interval.as_u64().to_string());
    }
    if let Some(penalty) = policy.penalty_identity() {
        let base = [prefix, "{", &identity, "}:", penalty].concat();
        keys.push(format!("{base}:strikes"));
        keys.push(format!("{base}:bans"));
    }
    (keys, args)
}

/// The decision from the script's reply: per limit, retry, remaining,
/// reset; then the ban in force; then the reply's last number (the permit
/// taken, or a lease's units), given back beside the decision.
pub(super) fn decision_from(
    policy: &Policy,
    reply: &Value,
) -> Result<(Decision, u64), BackendError> {
    let Value::Array(items) = reply else {
        return Err(BackendError::new(format!(
            "unexpected reply from the script: {reply:?}"
        )));
    };
    let number = |v: &Value| match v {
        Value::Int(n) => Ok(*n),
        other => Err(BackendError::new(format!(
            "unexpected value from the script: {other:?}"
        ))),
    };
    let limits = policy.limits();
    let Some((items, [ban, permit])) = items
        .split_last_chunk::<2>()
        .filter(|(i, _)| i.len() == 3 * limits.len())
    else {
        return Err(BackendError::new(
            "the script answered for a different number of limits",
        ));
    };
    let ban = Micros::new(number(ban)?.max(0) as u64);
    let last = number(permit)?.max(0) as u64;
    // Inline, like the decision itself: no allocation per reply.
    let mut outcomes = [Outcome::allowed(0, 0, Micros::ZERO); MAX_LIMITS];
    for ((slot, limit), item) in outcomes.iter_mut().zip(limits).zip(items.chunks_exact(3)) {
        let (retry, remaining, reset) = (number(&item[0])?, number(&item[1])?, number(&item[2])?);
        let (remaining, reset) = (remaining.max(0) as u64, Micros::new(reset.max(0) as u64));
        let capacity = limit.capacity();
        *slot = match retry {
            0 => Outcome::allowed(capacity, remaining, reset),
            r if r < 0 => Outcome::never(capacity, remaining, reset),
            r => Outcome::denied(capacity, remaining, reset, Micros::new(r as u64)),
        };
    }
    let outcomes = outcomes.into_iter().take(limits.len());
    let mut decision = Decision::from_outcomes(policy, outcomes).map_err(BackendError::new)?;
    if ban > Micros::ZERO {
        decision.ban(ban);
    }
    Ok((decision, last))
}
