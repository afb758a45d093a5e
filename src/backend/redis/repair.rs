//! A decision that failed in a way its keys might explain (a key of
//! another type, values a script cannot compute with) is checked there, in
//! one script call on exactly the keys it read: what their own type or
//! contents show to be wrong is deleted, so that one poisoned key costs
//! its client one decision, never its budget; when nothing is wrong with
//! them, the failure is the store's (a fault of the scripts, a refusal),
//! and it is reported as one.

use std::sync::OnceLock;

use ::redis::{Script, Value};

use super::link::Link;
use super::script::policy_keys;
use crate::backend::{BackendError, Cause};
use crate::key::Key;
use crate::Policy;

fn repair_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("lua/repair.lua")))
}

impl Link {
    /// `error`, a decision of `key` under `policy` that failed as one
    /// key's trouble would, checked on every key that decision read (its
    /// limits', a sliding log's, the penalty box's strikes and bans). When
    /// a key showed the fault and was deleted, the error stays the key's;
    /// otherwise it becomes the store's, told to the health (and so to a
    /// breaker or a cluster's circuit in front).
    pub(super) async fn repaired(
        &self,
        key: &Key,
        policy: &Policy,
        error: BackendError,
    ) -> BackendError {
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(repair_script().get_hash());
        let mut keys = Vec::new();
        let mut kinds = Vec::new();
        let field = policy_keys(&self.names, key, policy, |k, field| {
            keys.push(k.to_vec());
            // The keys' kinds are the scripts' own: a packed state is a
            // field of a shared hash, a sliding log's keys end `:log` and
            // `:sum` (script/mod.rs).
            kinds.push(match field {
                Some(_) => b'h',
                None if k.ends_with(b":log") => b'l',
                None if k.ends_with(b":sum") => b'n',
                None => b's',
            });
        });
        cmd.arg(keys.len()).arg(keys);
        cmd.arg(field.as_ref().map_or(&[][..], |f| &f[..]))
            .arg(kinds);
        let mended = self.answered(self.conn.run(repair_script(), &cmd)).await;
        match mended {
            Ok(Value::Int(n)) if n > 0 => {
                self.health.key_state(key, &error);
                error
            }
            Ok(_) => {
                let text = format!(
                    "{error}; the client's keys hold nothing a decision cannot read: the fault is the store's"
                );
                // The health says failing (the cause `other`); Sentinel is not
                // sent looking for another master: this one answered.
                self.health
                    .record::<()>(&Err(BackendError::new(text.clone())));
                BackendError::new(text)
            }
            // Already reported: a refusal of the repair is the store's too.
            Err(refused) => {
                BackendError::new(format!("{error}; checking its keys failed: {refused}"))
                    .with_cause(match refused.cause() {
                        Cause::KeyState => Cause::Other,
                        cause => cause,
                    })
            }
        }
    }
}
