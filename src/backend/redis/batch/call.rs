//! One decision's words as the script takes them, and a batch's call of
//! many: each distinct argument list of a lean batch sent once.

use std::io::Write;

use ::redis::Cmd;

use crate::backend::redis::script::{Shape, Words};

/// The most decisions a call holds (`max_batch`'s bound): a lean batch
/// names each decision's argument list in a byte.
pub(in crate::backend::redis) const MAX_BATCH: usize = 256;

/// How many of a lean batch's last distinct argument lists a decision's is
/// looked for among (`Call::together`).
const RECENT_LISTS: usize = 8;

/// One decision's keys and arguments, as `invocation` writes them: the
/// number of keys first, then each word, kept in one buffer.
#[derive(Default)]
pub(in crate::backend::redis) struct Call {
    keys: Option<usize>,
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Call {
    fn words(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.bytes[a..b])
    }

    pub(super) fn key_count(&self) -> usize {
        self.keys.unwrap_or(0)
    }

    /// The Redis keys this decision reads and writes.
    pub(super) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.words().take(self.key_count())
    }

    /// `EVALSHA <sha>` of this call alone (the shape's own script).
    pub(in crate::backend::redis) fn alone(&self, sha: &str) -> Cmd {
        let mut cmd = Cmd::with_capacity(self.ends.len() + 3, self.bytes.len() + 64);
        cmd.arg("EVALSHA").arg(sha).arg(self.key_count());
        for word in self.words() {
            cmd.arg(word);
        }
        cmd
    }

    /// The shape's batch script deciding `calls` in order: `EVALSHA
    /// <sha>`, or `EVAL <script>` (`script` given), then every key, the
    /// number of calls, and for a lean shape (`lean_batch.lua`) the
    /// number of distinct argument lists, those lists, then (when there
    /// are several) a word of each call's list, a byte each, and each
    /// call's own words; else (`batch.lua`) each call's numbers of
    /// keys and arguments, then every argument.
    pub(super) fn together<'a>(
        (sha, script): (&str, Option<&str>),
        shape: Shape,
        calls: impl Iterator<Item = &'a Call> + Clone,
    ) -> Cmd {
        let (keys, words) = calls
            .clone()
            .fold((0, 0), |(k, w), c| (k + c.key_count(), w + c.ends.len()));
        let mut cmd = Cmd::with_capacity(words + 8, 64 + words * 16);
        match script {
            Some(script) => cmd.arg("EVAL").arg(script),
            None => cmd.arg("EVALSHA").arg(sha),
        };
        cmd.arg(keys);
        for call in calls.clone() {
            call.words().take(call.key_count()).for_each(|k| {
                cmd.arg(k);
            });
        }
        cmd.arg(calls.clone().count());
        // A lean shape fixes its calls' counts (`invocation` writes what
        // it fixes: a unit test in shape.rs holds them together).
        if let Some((shared, _)) = shape.lean_list() {
            let list = |call: &'a Call| call.words().skip(call.key_count()).take(shared);
            let mut lists: Vec<&Call> = Vec::new();
            // Each decision's list in a byte (a batch holds at most
            // MAX_BATCH = 256 decisions, so at most 256 lists).
            let mut chosen: Vec<u8> = Vec::new();
            for call in calls.clone() {
                // Against the last few lists only: a policy's decisions
                // share one, and costs that vary (bytes, tokens) cost each
                // decision a few comparisons, not one per list.
                let recent = lists.len().saturating_sub(RECENT_LISTS)..lists.len();
                let known = recent.into_iter().find(|&j| list(lists[j]).eq(list(call)));
                let j = known.unwrap_or_else(|| {
                    lists.push(call);
                    lists.len() - 1
                });
                chosen.push(u8::try_from(j).unwrap_or(u8::MAX));
            }
            cmd.arg(lists.len());
            for call in &lists {
                list(call).for_each(|word| {
                    cmd.arg(word);
                });
            }
            // Named only when there is more than one.
            if lists.len() > 1 {
                cmd.arg(chosen);
            }
            for call in calls {
                call.words()
                    .skip(call.key_count() + shared)
                    .for_each(|word| {
                        cmd.arg(word);
                    });
            }
            return cmd;
        }
        for call in calls.clone() {
            cmd.arg(call.key_count())
                .arg(call.ends.len().saturating_sub(call.key_count()));
        }
        for call in calls {
            call.words().skip(call.key_count()).for_each(|a| {
                cmd.arg(a);
            });
        }
        cmd
    }
}

impl Words for Call {
    fn word(&mut self, word: &[u8]) {
        self.bytes.extend_from_slice(word);
        self.ends.push(self.bytes.len());
    }

    fn number(&mut self, n: i64) {
        // The first number is how many keys follow.
        if self.keys.is_none() {
            self.keys = Some(usize::try_from(n).unwrap_or(0));
            return;
        }
        let _ = write!(self.bytes, "{n}");
        self.ends.push(self.bytes.len());
    }
}
