//! One client's state Redis could not decide on — its key holds another
//! type, or values a script cannot compute with — replaced with a new
//! client's, so that one poisoned key costs that client one decision, not
//! every decision until someone mends the key by hand.

use super::RedisBackend;
use crate::key::Key;
use crate::Policy;

impl RedisBackend {
    /// Forget `key`'s states under `policy` (its key under the compact
    /// format; its field of the shared hash under the packed one, or the
    /// whole key if it is no hash). Failures are left to the next
    /// decision.
    pub(super) async fn replace_states(&self, key: &Key, policy: &Policy) {
        let field = self.redis_field(key);
        for limit in policy.limits() {
            for state in self.redis_keys(key, limit) {
                let hash = match &field {
                    Some(_) => {
                        let mut kind = ::redis::cmd("TYPE");
                        kind.arg(&state);
                        let kind = self.answered(self.conn.query::<String>(&kind)).await;
                        kind.is_ok_and(|kind| kind == "hash")
                    }
                    None => false,
                };
                let forget = match (&field, hash) {
                    (Some(field), true) => {
                        let mut hdel = ::redis::cmd("HDEL");
                        hdel.arg(&state).arg(field);
                        hdel
                    }
                    _ => {
                        let mut del = ::redis::cmd("DEL");
                        del.arg(&state);
                        del
                    }
                };
                let _ = self.answered(self.conn.query::<i64>(&forget)).await;
            }
        }
    }
}
