//! What one decision sends to Redis and reads back: the script, its keys
//! and arguments, and the decision in its reply.

use std::borrow::Cow;
use std::num::NonZeroU16;
use std::sync::Arc;

use ::redis::Value;
use sha2::{Digest, Sha256};

use crate::algorithm::{FixedRule, Form};
use crate::backend::BackendError;
use crate::key::Key;
use crate::policy::MAX_LIMITS;
use crate::{algorithm::Outcome, clock::Micros, Decision, Limit, Policy};

#[cfg(feature = "fair-share")]
pub(super) mod capacity;
mod shape;
#[cfg(feature = "redis-cluster")]
pub(super) mod slot;

pub(super) use self::shape::Shape;

/// How a backend writes its Redis keys. The format's version is part of
/// every key, so servers of two formats never read each other's state, nor
/// misread it as their own: during a rolling deploy that changes the
/// format, a client has a budget with each while both serve (up to twice a
/// limit), and the old format's keys expire by themselves once their state
/// stops mattering (one window; two for the sliding window counter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyFormat {
    /// `{prefix}3{<90-bit hash of the client's key>}<54-bit hash of the
    /// limit's identity>` (`5{` for a window's state), both SHA-256 in
    /// URL-safe base64 (the default): 30 bytes under the default prefix,
    /// short enough for Redis's smallest allocation of a key's name (a GCRA
    /// key takes 72 bytes by `MEMORY USAGE`, 88 from 31 bytes on; a
    /// window's, 72 below 1,000 requests and 104 from there). 90 bits keep
    /// clients apart whatever keys they choose: to take another client's
    /// budget a key must hit its hash, 2^90 tries; two keys of one's own
    /// that share a budget (2^45 tries) only halve one's own. Limits' identities are the operator's,
    /// a few per policy: 54 bits keep a hundred thousand of them apart but
    /// for a chance in fifty thousand.
    #[default]
    Compact,
    /// Many clients' states in one Redis hash: a fixed-size limit's state
    /// (the buckets, the fixed and sliding windows) is the field `<90-bit
    /// hash of the client's key>` of the hash `{prefix}4{<shard>}<54-bit
    /// hash of the limit's identity>` (`6{` for a window's state), where
    /// the shard is the client's hash modulo `shards`. Redis keeps a hash
    /// of up to 128 short fields as one flat allocation (a listpack), so a
    /// client costs its field and value and a share of its hash (42 bytes a
    /// client through the example server, 20,000 clients over 1,024
    /// shards) instead of a key of its own (144 bytes: name, value, expiry
    /// and table entries).
    ///
    /// A hash outlives the next whole ten seconds after each of its states'
    /// ends, so a write lengthens its expiry (`PEXPIRE … GT`) only when its
    /// state ends in a later ten seconds than the one it replaces: a known
    /// client's decision reads and writes its field alone. A write that
    /// adds a field looks at two others at random and deletes those whose
    /// state no longer matters, which keeps a hash at no more than about
    /// twice its clients of the last window. Redis scans a flat hash's
    /// fields on each read and write, so choose `shards` near the clients
    /// you expect in one window over 16: with fewer clients than shards
    /// each has a hash of its own, which costs more than a compact key.
    /// Redis 7.0 or later. All servers sharing a Redis must use the same
    /// `shards`, as the same format: a different number is a different key.
    /// Sliding logs and a penalty box's state keep keys of their own, named
    /// as the compact format's in the packed format's version.
    Packed {
        /// How many hashes each limit's clients are spread over.
        shards: NonZeroU16,
    },
}

impl KeyFormat {
    /// The packed format over 1,024 shards: for about 16,000 clients a
    /// window (hashes stay flat up to about 65,000).
    pub const PACKED: KeyFormat = KeyFormat::Packed {
        shards: NonZeroU16::new(1024).expect("not zero"),
    };

    /// The version in a key of this format: a window's state has one of
    /// its own, since it may be one integer (common.lua) that servers
    /// before it would read as no state at all; a bucket's, a log's and a
    /// penalty box's keep theirs, so no upgrade forgets them.
    fn version(self, window: bool) -> u8 {
        match (self, window) {
            (KeyFormat::Compact, false) => b'3',
            (KeyFormat::Packed { .. }, false) => b'4',
            (KeyFormat::Compact, true) => b'5',
            (KeyFormat::Packed { .. }, true) => b'6',
        }
    }
}

/// A backend's key prefix and format.
#[derive(Clone, Debug)]
pub(super) struct KeyNames {
    pub(super) prefix: Arc<str>,
    pub(super) format: KeyFormat,
}

/// The first `6 * N` bits of `bytes` (zeros past their end) as `N`
/// characters of URL-safe base64, unpadded: no byte of it is a brace or a
/// colon.
fn base64<const N: usize>(bytes: &[u8]) -> [u8; N] {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let (mut bits, mut held) = (0u32, 0);
    let mut bytes = bytes.iter();
    let mut chars = [0; N];
    for c in &mut chars {
        if held < 6 {
            bits = bits << 8 | u32::from(bytes.next().copied().unwrap_or(0));
            held += 8;
        }
        held -= 6;
        *c = B64[((bits >> held) & 63) as usize];
    }
    chars
}

/// Characters of a compact key's hash of the client's key (90 bits) and of
/// the limit's identity (54 bits).
pub(super) const CLIENT_CHARS: usize = 15;
const LIMIT_CHARS: usize = 9;

/// Where an invocation's words go: a command to send, or text (for
/// `redis-benchmark`). Numbers go as numbers, so no `String` is made for
/// them.
pub(super) trait Words {
    fn word(&mut self, word: &[u8]);
    fn number(&mut self, n: i64);
}

impl Words for ::redis::Cmd {
    fn word(&mut self, word: &[u8]) {
        self.arg(word);
    }
    fn number(&mut self, n: i64) {
        self.arg(n);
    }
}

impl Words for Vec<String> {
    fn word(&mut self, word: &[u8]) {
        self.push(String::from_utf8_lossy(word).into_owned());
    }
    fn number(&mut self, n: i64) {
        self.push(n.to_string());
    }
}

/// The Redis keys of `key` under `limit` (one, or two for a sliding log),
/// each given to `each`.
pub(super) fn limit_keys(names: &KeyNames, key: &Key, limit: &Limit, mut each: impl FnMut(&[u8])) {
    let mut client = Client::of(names, key);
    client.keys_of(names, limit, &mut |k, _| each(k));
}

/// The client's field in packed hashes (`None` under other formats).
pub(super) fn packed_field(names: &KeyNames, key: &Key) -> Option<[u8; CLIENT_CHARS]> {
    Client::of(names, key).field
}

/// The cluster slot every Redis key of `key` is in (its hash tag).
#[cfg(feature = "redis-cluster")]
pub(super) fn key_slot(names: &KeyNames, key: &Key) -> u16 {
    slot::slot(&Client::of(names, key).stem)
}

/// What a client's Redis keys are made of: the stem every one begins with
/// (prefix, version, hash tag), in a buffer with room for the rest; and,
/// under the packed format, the client's field.
struct Client {
    stem: Vec<u8>,
    /// Where the version is in the stem.
    version: usize,
    field: Option<[u8; CLIENT_CHARS]>,
}

impl Client {
    fn of(names: &KeyNames, key: &Key) -> Self {
        let mut stem = Vec::with_capacity(names.prefix.len() + 48);
        stem.extend_from_slice(names.prefix.as_bytes());
        let version = stem.len();
        stem.extend_from_slice(&[names.format.version(false), b'{']);
        let mut field = None;
        match names.format {
            KeyFormat::Compact => {
                stem.extend_from_slice(&base64::<CLIENT_CHARS>(&Sha256::digest(key.as_bytes())));
                stem.push(b'}');
            }
            KeyFormat::Packed { shards } => {
                let digest = Sha256::digest(key.as_bytes());
                field = Some(base64(&digest));
                let head = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
                let shard = head % u32::from(shards.get());
                stem.extend_from_slice(itoa::Buffer::new().format(shard).as_bytes());
                stem.push(b'}');
            }
        }
        Self {
            stem,
            version,
            field,
        }
    }

    /// The stem completed with `identity` (a limit's, a penalty box's) and,
    /// for a key of this client's alone under the packed format, the
    /// client's field before it: as it is, or its hash.
    fn push(&mut self, names: &KeyNames, identity: &str, own: bool) {
        if let (true, Some(field)) = (own, &self.field) {
            self.stem.extend_from_slice(field);
        }
        match names.format {
            KeyFormat::Compact | KeyFormat::Packed { .. } => self
                .stem
                .extend_from_slice(&base64::<LIMIT_CHARS>(&Sha256::digest(identity.as_bytes()))),
        }
    }

    /// The keys of `limit`, given to `each`; the stem is left as it was.
    fn keys_of(
        &mut self,
        names: &KeyNames,
        limit: &Limit,
        each: &mut impl FnMut(&[u8], Option<&[u8]>),
    ) {
        let stem = self.stem.len();
        let log = matches!(limit.rule().form(), Form::Log(_));
        let window = matches!(limit.rule().form(), Form::Fixed(_));
        self.stem[self.version] = names.format.version(window);
        self.push(names, limit.identity(), log);
        if log {
            let end = self.stem.len();
            for suffix in [&b":log"[..], b":sum"] {
                self.stem.extend_from_slice(suffix);
                each(&self.stem, None);
                self.stem.truncate(end);
            }
        } else {
            each(&self.stem, self.field.as_ref().map(|f| &f[..]));
        }
        self.stem.truncate(stem);
        self.stem[self.version] = names.format.version(false);
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

/// Every Redis key of `key` under `policy`: each limit's, then the penalty
/// box's strikes and bans (the order the scripts read them in), each with
/// the client's field in it when the state is a packed hash's field. Gives
/// back that field (under the packed format).
pub(super) fn policy_keys(
    names: &KeyNames,
    key: &Key,
    policy: &Policy,
    mut each: impl FnMut(&[u8], Option<&[u8]>),
) -> Option<[u8; CLIENT_CHARS]> {
    // One buffer for every key: prefix, identity, then each limit's part.
    let mut client = Client::of(names, key);
    for limit in policy.limits() {
        client.keys_of(names, limit, &mut each);
    }
    if let Some(penalty) = policy.penalty_identity() {
        client.push(names, penalty, true);
        let end = client.stem.len();
        for suffix in [&b":strikes"[..], b":bans"] {
            client.stem.extend_from_slice(suffix);
            each(&client.stem, None);
            client.stem.truncate(end);
        }
    }
    client.field
}

/// The script's number of keys, keys and arguments for one decision,
/// written to `out` (after `EVALSHA <sha>`), for a script of `shape`.
pub(super) fn invocation(
    names: &KeyNames,
    key: &Key,
    policy: &Policy,
    (ask, shape): (Ask, Shape),
    now: Option<Micros>,
    out: &mut impl Words,
) {
    let limits = policy.limits();
    let logs = limits
        .iter()
        .filter(|l| matches!(l.rule().form(), Form::Log(_)))
        .count();
    let penalty_keys = if policy.penalty_identity().is_some() {
        2
    } else {
        0
    };
    out.number((limits.len() + logs + penalty_keys) as i64);

    let field = policy_keys(names, key, policy, |k, _| out.word(k));

    match now {
        Some(now) => out.number(now.as_u64() as i64),
        None => out.word(b""),
    }
    if let (true, [limit], Ask::Check(cost)) = (shape.is_lean(), limits, ask) {
        // The lean scripts' arguments: cost, limit, and the one span
        // each needs: a bucket's interval, a window's length.
        let span = match limit.rule().form() {
            Form::Bucket(gcra) => gcra.interval(),
            Form::Fixed(_) | Form::Log(_) => limit.quota().window_micros(),
        };
        out.number(i64::from(cost));
        out.number(i64::from(limit.capacity()));
        out.number(span.as_u64() as i64);
        if let Some(field) = &field {
            out.word(field);
        }
        return;
    }
    // The cost, then the mode: 0/1 (whether denials count), s (settle),
    // r/n and the permit (release, renew), l<want>:<back> (lease).
    let (cost, mode): (i64, Cow<'static, str>) = match ask {
        Ask::Check(cost) => {
            let counted = if policy.counts_denied() { "1" } else { "0" };
            (i64::from(cost), counted.into())
        }
        Ask::Settle { reserved, actual } => (i64::from(actual) - i64::from(reserved), "s".into()),
        Ask::Release { permit, cost } => (i64::from(cost), format!("r{}", permit.as_u64()).into()),
        Ask::Renew { permit, cost } => (i64::from(cost), format!("n{}", permit.as_u64()).into()),
        Ask::Lease { cost, want, back } => (i64::from(cost), format!("l{want}:{back}").into()),
    };
    out.number(cost);
    out.word(mode.as_bytes());
    match policy.penalty() {
        Some(penalty) => {
            out.number(i64::from(penalty.strikes()));
            out.number(penalty.within_micros().as_u64() as i64);
            out.number(penalty.ban_micros().as_u64() as i64);
            out.number(penalty.max_ban_micros().as_u64() as i64);
        }
        None => (0..4).for_each(|_| out.number(0)),
    }
    if let Some(field) = &field {
        out.word(field);
    }
    for limit in limits {
        // The algorithm codes of check.lua; a fixed window's fourth number
        // is its calendar's code (0: none).
        let (code, interval) = match limit.rule().form() {
            Form::Fixed(FixedRule::FixedWindow(_)) => {
                let calendar = limit.quota().calendar();
                (1, Micros::new(calendar.map_or(0, |c| c.code())))
            }
            Form::Log(_) if limit.is_concurrent() => (5, Micros::ZERO),
            Form::Log(_) => (2, Micros::ZERO),
            Form::Fixed(FixedRule::SlidingWindow(_)) => (3, Micros::ZERO),
            Form::Bucket(gcra) => (4, gcra.interval()),
        };
        out.number(code);
        out.number(i64::from(limit.capacity()));
        out.number(limit.quota().window_micros().as_u64() as i64);
        out.number(interval.as_u64() as i64);
    }
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
    // The lean scripts leave out the two trailing numbers (always 0 there).
    let per_limit = |items: &[Value]| items.len() == 3 * limits.len();
    let (items, ban, last) = if per_limit(items) {
        (&items[..], 0, 0)
    } else if let Some((items, [ban, last])) =
        items.split_last_chunk::<2>().filter(|(i, _)| per_limit(i))
    {
        (items, number(ban)?, number(last)?)
    } else {
        return Err(BackendError::new(
            "the script answered for a different number of limits",
        ));
    };
    let ban = Micros::new(ban.max(0) as u64);
    let last = last.max(0) as u64;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_url_safe_and_unpadded() {
        // The first `chars` characters: those of a shorter encoding.
        let encode = |bytes: &[u8], chars: usize| {
            String::from_utf8(base64::<12>(bytes)[..chars].to_vec()).unwrap()
        };
        assert_eq!(encode(b"Man", 4), "TWFu");
        assert_eq!(encode(b"Ma", 3), "TWE");
        assert_eq!(encode(&[0xfb, 0xff], 3), "-_8");
        // Whole bytes, or the leading bits of a longer hash.
        assert_eq!(encode(b"Many hands make light work.", 12), "TWFueSBoYW5k");
        assert_eq!(encode(b"Many hands make light work.", 9), "TWFueSBoY");
        assert_eq!(encode(&[0xff; 7], 9), "_________");
    }

    /// A policy of a GCRA limit `a`, a sliding log `b` and a penalty box:
    /// a key of each kind but a window's.
    fn a_bucket_a_log_and_a_box() -> crate::policy::PolicyBuilder {
        use crate::policy::PenaltyBox;
        use crate::Algorithm;
        use std::time::Duration;
        Policy::builder()
            .limit("a", Algorithm::Gcra, crate::Quota::per_minute(3).unwrap())
            .limit(
                "b",
                Algorithm::SlidingLog,
                crate::Quota::per_hour(9).unwrap(),
            )
            .penalty(PenaltyBox::new(2, Duration::from_secs(60), Duration::from_secs(60)).unwrap())
    }

    /// An upgrade finds the state it left: a bucket's, a log's and a
    /// penalty box's keys keep the names the version before wrote (these,
    /// from it), and only a window's, which may now be one integer, take a
    /// version of their own (5 compact, 6 packed).
    #[test]
    fn keys_keep_their_names_but_windows() {
        use crate::Algorithm;
        let policy = a_bucket_a_log_and_a_box()
            .limit(
                "c",
                Algorithm::SlidingWindow,
                crate::Quota::per_minute(5).unwrap(),
            )
            .limit(
                "d",
                Algorithm::FixedWindow,
                crate::Quota::per_hour(7).unwrap(),
            )
            .build()
            .unwrap();
        let seven = KeyFormat::Packed {
            shards: NonZeroU16::new(7).unwrap(),
        };
        let expected = [
            (
                KeyFormat::Compact,
                [
                    "rl:3{pUagvNcsvRD86Te}efsWGDflF",
                    "rl:3{pUagvNcsvRD86Te}Dk19G9aC4:log",
                    "rl:3{pUagvNcsvRD86Te}Dk19G9aC4:sum",
                    "rl:5{pUagvNcsvRD86Te}pgtyK9rce",
                    "rl:5{pUagvNcsvRD86Te}_7V5QtphQ",
                    "rl:3{pUagvNcsvRD86Te}6I-vLjIFf:strikes",
                    "rl:3{pUagvNcsvRD86Te}6I-vLjIFf:bans",
                ],
            ),
            (
                seven,
                [
                    "rl:4{6}efsWGDflF",
                    "rl:4{6}pUagvNcsvRD86TeDk19G9aC4:log",
                    "rl:4{6}pUagvNcsvRD86TeDk19G9aC4:sum",
                    "rl:6{6}pgtyK9rce",
                    "rl:6{6}_7V5QtphQ",
                    "rl:4{6}pUagvNcsvRD86Te6I-vLjIFf:strikes",
                    "rl:4{6}pUagvNcsvRD86Te6I-vLjIFf:bans",
                ],
            ),
        ];
        for (format, expected) in expected {
            let names = KeyNames {
                prefix: "rl:".into(),
                format,
            };
            let mut keys = Vec::new();
            policy_keys(&names, &Key::new("user", "alice"), &policy, |k, _| {
                keys.push(String::from_utf8(k.to_vec()).unwrap())
            });
            assert_eq!(keys, expected, "{format:?}");
        }
    }

    /// Under the packed format every key of a client carries its shard's
    /// hash tag (one cluster slot, as the compact format's client tag);
    /// fixed-size limits name a hash shared by the shard with the client's
    /// field in it, and keys of the client's own (a sliding log, a penalty
    /// box) hold the field in their names.
    #[test]
    fn packed_keys_share_the_shard_tag_and_name_the_field() {
        let names = KeyNames {
            prefix: "rl:".into(),
            format: KeyFormat::Packed {
                shards: NonZeroU16::new(7).unwrap(),
            },
        };
        let policy = a_bucket_a_log_and_a_box().build().unwrap();
        let mut tags = std::collections::BTreeSet::new();
        for client in ["alice", "bob", "{x}", "\u{0}:"] {
            let key = Key::new("user", client);
            let mut keys = Vec::new();
            let field = policy_keys(&names, &key, &policy, |k, f| {
                keys.push((
                    String::from_utf8(k.to_vec()).unwrap(),
                    f.map(<[u8]>::to_vec),
                ));
            })
            .unwrap();
            let field = String::from_utf8(field.to_vec()).unwrap();
            assert_eq!(field.len(), CLIENT_CHARS);
            let tag = &keys[0].0[..keys[0].0.find('}').unwrap() + 1];
            let shard: u16 = tag["rl:4{".len()..tag.len() - 1].parse().unwrap();
            assert!(shard < 7, "{tag}");
            tags.insert(shard);
            // a's hash (shared), b's log and sum, the box's strikes and bans.
            assert_eq!(keys.len(), 5, "{keys:?}");
            for (i, (name, in_field)) in keys.iter().enumerate() {
                assert!(name.starts_with(tag), "{name}");
                assert_eq!(name.matches('{').count(), 1, "{name}");
                if i == 0 {
                    assert_eq!(in_field.as_deref(), Some(field.as_bytes()));
                    assert!(!name.contains(&field), "{name}");
                } else {
                    assert_eq!(in_field, &None);
                    assert!(name[tag.len()..].starts_with(&field), "{name}");
                }
            }
        }
        assert!(tags.len() > 1, "clients spread over shards: {tags:?}");
    }
}
