//! Which script a policy's decision runs ([`Shape`]: only the parts it
//! uses, for its key format), and the script's text, assembled from the
//! Lua parts in `lua/` with their placeholders filled in.

use super::{Ask, KeyFormat};
use crate::algorithm::{FixedRule, Form};
use crate::Policy;

/// Which parts a call's script is made of. Each policy gets a script of
/// only the algorithms it uses (and the penalty box if it has one): Lua
/// creates every function a script defines on every call, so the parts a
/// policy does not use would cost it on each decision. A check under one
/// fixed-size limit (no penalty box, denials not counted), the common case,
/// gets a lean script of its own (`lean_*.lua`), with fewer arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(in crate::backend::redis) struct Shape(u8);

impl Shape {
    const FIXED_WINDOW: u8 = 1;
    const GCRA: u8 = 2;
    const SLIDING_WINDOW: u8 = 4;
    const LOG: u8 = 8;
    const PENALTY: u8 = 16;
    const LEAN: u8 = 32;
    /// The packed key format: fixed-size states as fields of shared hashes.
    const PACKED: u8 = 128;
    /// How many shapes there are.
    pub(in crate::backend::redis) const COUNT: usize = 256;

    pub(in crate::backend::redis) fn of(policy: &Policy, ask: Ask, format: KeyFormat) -> Self {
        let mut bits = 0;
        for limit in policy.limits() {
            bits |= match limit.rule().form() {
                Form::Fixed(FixedRule::FixedWindow(_)) => Self::FIXED_WINDOW,
                Form::Bucket(_) => Self::GCRA,
                Form::Fixed(FixedRule::SlidingWindow(_)) => Self::SLIDING_WINDOW,
                Form::Log(_) => Self::LOG,
            };
        }
        if policy.penalty().is_some() {
            bits |= Self::PENALTY;
        }
        // The lean fixed window knows no calendar.
        let lean = matches!(ask, Ask::Check(_))
            && policy.limits().len() == 1
            && bits & (Self::LOG | Self::PENALTY) == 0
            && !policy.counts_denied()
            && policy.limits()[0].quota().calendar().is_none();
        if lean {
            bits |= Self::LEAN;
        }
        if let KeyFormat::Packed { .. } = format {
            bits |= Self::PACKED;
        }
        Self(bits)
    }

    /// Whether the call takes a lean script, with the lean arguments.
    pub(in crate::backend::redis) fn is_lean(self) -> bool {
        self.0 & Self::LEAN != 0
    }

    /// A lean decision's numbers of keys and of arguments, which its shape
    /// fixes (a batch of lean decisions sends no counts of its own).
    pub(in crate::backend::redis) fn lean_counts(self) -> Option<(usize, usize)> {
        let field = usize::from(self.0 & Self::PACKED != 0);
        self.is_lean().then_some((1, LEAN_ARGS.len() + field))
    }

    /// A lean decision's arguments in a batch (lean_batch.lua): how many
    /// its list shares with the decisions of its policy, sent once a
    /// batch, and how many are its own (the client's field).
    pub(in crate::backend::redis) fn lean_list(self) -> Option<(usize, usize)> {
        self.lean_counts()
            .map(|(_, args)| (LEAN_ARGS.len(), args - LEAN_ARGS.len()))
    }

    /// Its index among the [`COUNT`](Self::COUNT) shapes.
    pub(in crate::backend::redis) fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The script of one decision: the time, the helpers, the parts, then
    /// the driver; or, for a lean check under one GCRA limit or one fixed
    /// window, the time and its script written out whole. The parts name
    /// what the format decides as placeholders (`{{read}}`, …), filled in
    /// here ([`state_calls`]), and where the arguments are ([`CHECK_ARGS`],
    /// [`LEAN_ARGS`]).
    pub(in crate::backend::redis) fn source(self) -> String {
        let parts = self.parts(false);
        [parts.head, parts.prelude, parts.helpers, parts.driver].concat()
    }

    /// The script of a batch of decisions of this shape (`batch.lua`, or
    /// `lean_batch.lua` for a lean shape): the
    /// helpers made once, and the time, the client's field and the driver
    /// run per decision as the [`source`](Self::source) runs them for one
    /// (Lua makes a script's every function on every call: made once a
    /// batch, they cost a decision nothing).
    pub(in crate::backend::redis) fn batch_source(self) -> String {
        let parts = self.parts(true);
        // The helpers' cache of states read is one decision's.
        let fresh = match parts.helpers.is_empty() {
            true => "",
            false => "states = {}\n",
        };
        let body = [parts.prelude.as_str(), fresh, &parts.driver].concat();
        // A lean decision reads its key where it is in the batch's keys
        // (after an offset, `{{ko}}`) and its arguments from its list
        // (lean_batch.lua); the general driver, which looks for the end of
        // its arguments, gets tables of its own.
        let (decide, batch) = match self.lean_list() {
            Some((shared, own)) => {
                let (signature, field) = match own {
                    0 => ("local function decide(ko, ARGV)\n", ""),
                    _ => (
                        "local function decide(ko, ARGV, own_field)\n",
                        ", ARGV[at + 1]",
                    ),
                };
                // A list's table made whole, at its size.
                let list = (1..=shared)
                    .map(|x| format!("tonumber(ARGV[at + {x}]) or false"))
                    .collect::<Vec<_>>()
                    .join(", ");
                (
                    signature.to_owned() + &body,
                    fill(
                        include_str!("../lua/lean_batch.lua"),
                        &[
                            ("shared", &shared.to_string()),
                            ("list", &list),
                            ("own", &own.to_string()),
                            ("field", field),
                        ],
                    ),
                )
            }
            None => (
                "local function decide(KEYS, ARGV)\n".to_owned() + &body,
                include_str!("../lua/batch.lua").to_owned(),
            ),
        };
        // The general driver's arguments repeat from decision to decision
        // (a policy's limit and span, the costs): each text is parsed once
        // a batch (`PARSED_ONCE`). A lean batch reads each argument list
        // once (lean_batch.lua).
        let parsed_once = match self.is_lean() {
            true => "",
            false => PARSED_ONCE,
        };
        [
            &parts.head,
            parsed_once,
            &parts.helpers,
            &decide,
            "end\n",
            &batch,
        ]
        .concat()
    }

    /// The parts of one decision's script, or (`batch`) of a batch's.
    fn parts(self, batch: bool) -> Parts {
        let has = |bit: u8| self.0 & bit != 0;
        // A batch's lean decisions may claim new clients' states
        // (`{{claim}}`, lean_sliding_window.lua) where the server runs
        // `SET … NX GET` (Redis 7.0 and later, which alone have
        // REDIS_VERSION_NUM) and states are keys of their own.
        // (Elsewhere they are only declared, and the table of a lean
        // sliding window's claims is made only for one: a table made on
        // every call costs a lone decision about 700 instructions.)
        let table = match has(Self::LEAN) && has(Self::SLIDING_WINDOW) {
            true => ", {}",
            false => "",
        };
        let claims = match batch && !has(Self::PACKED) {
            true => format!(
                "local can_claim = redis.REDIS_VERSION_NUM ~= nil\n\
                 local claiming, claims = can_claim{table}\n"
            ),
            false => "local can_claim, claiming, claims\n".to_owned(),
        };
        let head = format!(
            "{claims}local now, slack_ms, field{}\n",
            if batch { ", batch_now" } else { "" }
        );
        // The client's field follows the fixed arguments, and the limits
        // follow it.
        let fixed = if has(Self::LEAN) {
            LEAN_ARGS.len()
        } else {
            CHECK_ARGS.len()
        };
        let mut prelude = include_str!("../lua/now.lua").to_owned();
        let server_time = match batch {
            false => "local t = redis.call('TIME')\n  now = t[1] * 1000000 + t[2]",
            true => concat!(
                "if not batch_now then\n",
                "    local t = redis.call('TIME')\n",
                "    batch_now = t[1] * 1000000 + t[2]\n",
                "  end\n",
                "  now = batch_now"
            ),
        };
        // How a decision reads its arguments and replies: one alone with
        // `tonumber`, in a batch with `number` (`PARSED_ONCE`); a lean one
        // in a batch its key from its offset into the batch's keys and its
        // arguments from its list, parsed already, replying with its
        // numbers themselves, not a table (lean_batch.lua lays them out
        // flat).
        let lean_batch = batch && has(Self::LEAN);
        let number = match (batch, lean_batch) {
            (false, _) => "tonumber",
            // A lean batch's decision reads its list's numbers themselves.
            (true, true) => "",
            (true, false) => "number",
        };
        let (ko, reply, reply_end, unpack) = match lean_batch {
            true => ("ko + ", "", "", "unpack"),
            false => ("", "{ ", " }", ""),
        };
        // A lean write's TTL (lean_gcra.lua, lean_fixed_window.lua): in a
        // batch under the compact format, its text made once a batch
        // (`PX_TEXTS`, then part of the head).
        let lean_write = [Self::LEAN | Self::GCRA, Self::LEAN | Self::FIXED_WINDOW]
            .contains(&(self.0 & !Self::PACKED));
        let px_texts = batch && lean_write && !has(Self::PACKED);
        let px_text = if px_texts { "px_text" } else { "" };
        let per_decision = [
            ("number", number),
            ("ko", ko),
            ("reply", reply),
            ("reply_end", reply_end),
            ("unpack", unpack),
            ("px_text", px_text),
        ];
        prelude = fill(&prelude, &[("server_time", server_time)]);
        if has(Self::PACKED) {
            prelude.push_str(&match lean_batch {
                true => "field = own_field\n".to_owned(),
                false => format!("field = ARGV[{}]\n", fixed + 1),
            });
        }
        prelude = fill(&prelude, &per_decision);
        let first_limit_arg = (fixed + 1 + usize::from(has(Self::PACKED))).to_string();
        let mut values = state_calls(has(Self::PACKED)).to_vec();
        values.push(("first_limit_arg", &first_limit_arg));
        let shape = self.0 & !Self::PACKED;
        let (helpers, driver): (String, &str) = if shape == Self::LEAN | Self::GCRA {
            (String::new(), include_str!("../lua/lean_gcra.lua"))
        } else if shape == Self::LEAN | Self::FIXED_WINDOW {
            (String::new(), include_str!("../lua/lean_fixed_window.lua"))
        } else {
            let parts = [
                (true, include_str!("../lua/integers.lua")),
                (true, include_str!("../lua/common.lua")),
                (has(Self::SLIDING_WINDOW), include_str!("../lua/exact.lua")),
                (
                    has(Self::FIXED_WINDOW),
                    include_str!("../lua/fixed_window.lua"),
                ),
                (has(Self::GCRA), include_str!("../lua/gcra.lua")),
                (
                    has(Self::SLIDING_WINDOW),
                    include_str!("../lua/sliding_window.lua"),
                ),
                (has(Self::LOG), include_str!("../lua/sliding_log.lua")),
                (has(Self::PENALTY), include_str!("../lua/penalty.lua")),
            ];
            let helpers: String = parts
                .iter()
                .filter(|(used, _)| *used)
                .map(|(_, text)| *text)
                .collect();
            let driver = match has(Self::LEAN) {
                true => include_str!("../lua/lean_sliding_window.lua"),
                false => include_str!("../lua/check.lua"),
            };
            (fill(&helpers, &values), driver)
        };
        values.extend(per_decision);
        Parts {
            head: match px_texts {
                true => head + PX_TEXTS,
                false => head,
            },
            prelude,
            helpers,
            driver: fill(driver, &values),
        }
    }
}

/// What a batch parses its arguments with: `tonumber`, once per text (a
/// number's text costs Lua about as much to parse as the rest of a lean
/// decision's reading of its arguments).
const PARSED_ONCE: &str = "local parsed = {}
local function number(text)
  local n = parsed[text]
  if n == nil then
    n = tonumber(text) or false
    parsed[text] = n
  end
  return n or nil
end
";

/// A batch's TTLs as text, each made once: new clients' states under one
/// limit end alike, and a number Redis turns into text itself costs it
/// more than the rest of the SET (a batch of new clients' GCRA decisions
/// takes a twentieth fewer instructions).
const PX_TEXTS: &str = "local px_texts = {}
local function px_text(ms)
  local text = px_texts[ms]
  if not text then
    text = string.format('%d', ms)
    px_texts[ms] = text
  end
  return text
end
";

/// A script's text in the order it runs: what every decision declares,
/// what it runs first (the time, the client's field), the functions it
/// calls, and the driver that decides.
struct Parts {
    head: String,
    prelude: String,
    helpers: String,
    driver: String,
}

/// The arguments a script call passes before the client's field (under
/// the packed format) and the limits, in order: what [`invocation`] writes
/// and `check.lua` reads (`ARGV[1]` is `now`). The mode is `0`/`1`
/// (whether denials count), `s` (settle), `r`/`n` and a permit (release,
/// renew), or `l<want>:<back>` (lease); the penalty box's four are zeros
/// for none.
pub(in crate::backend::redis) const CHECK_ARGS: [&str; 7] =
    ["now", "cost", "mode", "strikes", "within", "ban", "max_ban"];

/// The lean scripts' arguments (a check under one fixed-size limit): the
/// one span each needs, a bucket's interval or a window's length.
pub(in crate::backend::redis) const LEAN_ARGS: [&str; 4] = ["now", "cost", "limit", "span"];

/// The state calls the scripts' placeholders stand for: a key of its own
/// per state (the compact format), or the client's field of
/// a hash many clients share (the packed format: the write,
/// packed_write.lua, in place of each SET, not as a function: Lua makes a
/// script's every function on every call). The scripts are otherwise the
/// same, so the compact scripts carry nothing of the packed format's.
pub(in crate::backend::redis) fn state_calls(packed: bool) -> [(&'static str, &'static str); 5] {
    const PACKED_WRITE: &str = include_str!("../lua/packed_write.lua");
    if !packed {
        return [
            ("read", "redis.call('GET', key)"),
            ("delete", "redis.call('DEL', key)"),
            (
                "write",
                "redis.call('SET', key, state, 'PX', ttl_ms(e - now))",
            ),
            ("write_lean", "redis.call('SET', key, state, 'PX', px)"),
            (
                "claim",
                "redis.call('SET', key, state, 'PX', px, 'NX', 'GET')",
            ),
        ];
    }
    // Every write has in scope `ends` and `was` (packed_write.lua):
    // common.lua's keeps the ends in `states`.
    let write = concat!(
        "local was, ends = (states[key] or { 0 })[1], e\n",
        include_str!("../lua/packed_write.lua")
    );
    [
        ("read", "redis.call('HGET', key, field)"),
        ("delete", "redis.call('HDEL', key, field)"),
        ("write", write.trim_end()),
        ("write_lean", PACKED_WRITE.trim_end()),
        // (Never claimed: a field's claim would need its hash's expiry.)
        ("claim", "error('no claim under the packed format')"),
    ]
}

/// `template` with each `{{name}}` replaced by its value; a name without
/// one is left as it is (the tests find none in any script).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 2048);
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open..].find("}}").map(|c| open + c) else {
            break;
        };
        out.push_str(&rest[..open]);
        let name = &rest[open + 2..close];
        match values.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => out.push_str(value),
            None => out.push_str(&rest[open..close + 2]),
        }
        rest = &rest[close + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::super::{invocation, KeyNames};
    use super::*;
    use crate::key::Key;

    const SHAPES: [u8; 4] = [
        Shape::GCRA | Shape::FIXED_WINDOW | Shape::SLIDING_WINDOW | Shape::LOG | Shape::PENALTY,
        Shape::LEAN | Shape::GCRA,
        Shape::LEAN | Shape::FIXED_WINDOW,
        Shape::LEAN | Shape::SLIDING_WINDOW,
    ];

    /// Every placeholder of every script (one decision's and a batch's) is
    /// filled, and each format's scripts make their state calls only its
    /// way: no packed state is read or written as a key of its own, no
    /// compact one as a field.
    #[test]
    fn every_script_is_filled_in_and_calls_its_format_s_way() {
        for bits in SHAPES {
            for format in [0, Shape::PACKED] {
                let shape = Shape(bits | format);
                for source in [shape.source(), shape.batch_source()] {
                    assert!(!source.contains("{{"), "an unfilled placeholder in {bits}");
                    let packed = format & Shape::PACKED != 0;
                    for (_, call) in state_calls(!packed) {
                        assert!(!source.contains(call), "{call} in {bits}, packed: {packed}");
                    }
                    assert_eq!(source.contains("HSET', key, field, state"), packed);
                }
            }
        }
    }

    /// The arguments the scripts read are the ones the tables name, and
    /// `invocation` writes as many before the limits.
    #[test]
    fn the_scripts_and_the_invocation_share_one_argument_layout() {
        let read = |source: &str| -> Vec<usize> {
            source
                .match_indices("ARGV[")
                .filter_map(|(at, _)| {
                    let digits: String = source[at + 5..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    digits.parse().ok()
                })
                .collect()
        };
        for (bits, table) in [
            (SHAPES[0], CHECK_ARGS.len()),
            (SHAPES[1], LEAN_ARGS.len()),
            (SHAPES[2], LEAN_ARGS.len()),
        ] {
            let compact = read(&Shape(bits).source());
            assert!(compact.iter().all(|&n| n <= table), "{bits}: {compact:?}");
            let packed = read(&Shape(bits | Shape::PACKED).source());
            assert!(
                packed.contains(&(table + 1)),
                "the field follows the table: {packed:?}"
            );
        }
        let names = KeyNames {
            prefix: "rl:".into(),
            format: KeyFormat::Compact,
        };
        let key = Key::new("user", "a");
        let two: Policy = Policy::builder()
            .limit(
                "a",
                crate::Algorithm::Gcra,
                crate::Quota::per_minute(3).unwrap(),
            )
            .limit(
                "b",
                crate::Algorithm::FixedWindow,
                crate::Quota::per_hour(9).unwrap(),
            )
            .build()
            .unwrap();
        let ask = Ask::Check(1);
        let mut words: Vec<String> = Vec::new();
        invocation(
            &names,
            &key,
            &two,
            (ask, Shape::of(&two, ask, names.format)),
            None,
            &mut words,
        );
        // The number of keys, the keys, the fixed arguments, four per limit.
        let keys: usize = words[0].parse().unwrap();
        assert_eq!(words.len(), 1 + keys + CHECK_ARGS.len() + 4 * 2);
        let one: Policy = "3/min".parse().unwrap();
        let lean = Shape::of(&one, ask, names.format);
        assert!(lean.is_lean());
        let mut words: Vec<String> = Vec::new();
        invocation(&names, &key, &one, (ask, lean), None, &mut words);
        assert_eq!(words.len(), 1 + 1 + LEAN_ARGS.len());
        // A batch of lean decisions sends no counts: the shape's are theirs.
        for format in [KeyFormat::Compact, KeyFormat::PACKED] {
            let names = KeyNames {
                prefix: "rl:".into(),
                format,
            };
            let lean = Shape::of(&one, ask, format);
            let mut words: Vec<String> = Vec::new();
            invocation(&names, &key, &one, (ask, lean), None, &mut words);
            let keys: usize = words[0].parse().unwrap();
            assert_eq!(lean.lean_counts(), Some((keys, words.len() - 1 - keys)));
        }
        assert_eq!(Shape::of(&two, ask, KeyFormat::Compact).lean_counts(), None);
    }
}
