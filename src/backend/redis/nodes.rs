//! A circuit per Redis Cluster node (feature `redis-cluster`): a dead
//! primary opens the circuit of its own slots only. Keys of the other nodes
//! stay on Redis; keys of the dead one fail at once (the failure rule or a
//! fallback decides them) instead of each waiting the timeout, one probe at
//! a time asks it again, and when its replica takes over the slots, the map
//! of slots is read again and they go to the new node at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ::redis::cluster_async::ClusterConnection;
use ::redis::{RedisError, Value};
use arc_swap::ArcSwap;

use crate::backend::circuit::{Circuit, Settings};

/// Slots in a Redis Cluster.
const SLOTS: usize = 16_384;
/// The map is read again at most this often.
const REFRESH_AT_MOST_EVERY: Duration = Duration::from_millis(100);

pub(super) struct Nodes {
    /// Each slot's node's circuit (none: not known yet).
    slots: ArcSwap<Vec<Option<Arc<Circuit>>>>,
    /// Each node's circuit, by `host:port`: kept across refreshes.
    circuits: Mutex<HashMap<String, Arc<Circuit>>>,
    settings: Settings,
    refreshing: AtomicBool,
    /// When the map was last asked for, in ms since `epoch`.
    asked_at: AtomicU64,
    epoch: Instant,
}

impl Nodes {
    pub(super) fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Self {
            slots: ArcSwap::from_pointee(vec![None; SLOTS]),
            circuits: Mutex::default(),
            settings,
            refreshing: AtomicBool::new(false),
            asked_at: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// The circuit of the node that holds `slot`, if known.
    pub(super) fn circuit(&self, slot: u16) -> Option<Arc<Circuit>> {
        self.slots.load()[usize::from(slot) % SLOTS].clone()
    }

    /// Read the map of slots again, on a task of its own (one at a time,
    /// at most every 100 ms).
    pub(super) fn refresh(self: &Arc<Self>, conn: &ClusterConnection) {
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.asked_at.load(Ordering::Relaxed);
        if now < last + REFRESH_AT_MOST_EVERY.as_millis() as u64
            || self.refreshing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.asked_at.store(now, Ordering::Relaxed);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refreshing.store(false, Ordering::Release);
            return;
        };
        let (this, mut conn) = (Arc::clone(self), conn.clone());
        runtime.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(1), this.load(&mut conn)).await;
            this.refreshing.store(false, Ordering::Release);
        });
    }

    /// Ask the cluster which node holds which slots.
    pub(super) async fn load(&self, conn: &mut ClusterConnection) -> Result<(), RedisError> {
        let reply: Value = ::redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(conn)
            .await?;
        let Value::Array(ranges) = reply else {
            return Ok(());
        };
        let mut slots = vec![None; SLOTS];
        let mut circuits = self.circuits.lock().unwrap_or_else(PoisonError::into_inner);
        for range in ranges {
            let Value::Array(range) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
                (range.first(), range.get(1), range.get(2))
            else {
                continue;
            };
            let (Some(Value::BulkString(host)), Some(Value::Int(port))) =
                (node.first(), node.get(1))
            else {
                continue;
            };
            let addr = format!("{}:{port}", String::from_utf8_lossy(host));
            let circuit = circuits
                .entry(addr)
                .or_insert_with(|| Arc::new(Circuit::new(self.settings)));
            let (start, end) = (*start as usize, (*end as usize).min(SLOTS - 1));
            for slot in slots.iter_mut().take(end + 1).skip(start) {
                *slot = Some(Arc::clone(circuit));
            }
        }
        self.slots.store(Arc::new(slots));
        Ok(())
    }
}

/// The cluster slot of a Redis key: CRC16 of its hash tag (what is between
/// the first `{` and the next `}`, when not empty), else of the whole key.
pub(super) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// CRC-16/XMODEM, the one Redis Cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_are_redis_clusters() {
        // Values from Redis's own CLUSTER KEYSLOT.
        assert_eq!(slot(b"123456789"), 12_739);
        assert_eq!(slot(b"foo"), 12_182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
    }
}
