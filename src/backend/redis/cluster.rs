//! Redis Cluster (feature `redis-cluster`): its constructors, and a circuit
//! per node: a dead
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

use super::connection::Connection;
use super::script::slot::SLOTS;
use super::script::{self, Ask};
use super::RedisBackend;
use crate::backend::circuit::{Circuit, Pass, Settings};
use crate::backend::BackendError;
use crate::key::Key;
use crate::{clock::Micros, Decision, Policy};

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

/// A connection to the cluster `client` (its nodes, timeouts and TLS as
/// the builder set them) reaches.
pub(super) async fn connect(
    client: ::redis::cluster::ClusterClientBuilder,
) -> Result<Connection, BackendError> {
    let client = client.build().map_err(BackendError::from)?;
    let connection = client.get_async_connection().await;
    Ok(Connection::Cluster(connection.map_err(BackendError::from)?))
}

/// The circuits in a call's way, on the backend's cluster connection.
impl Nodes {
    /// Which node holds which slots, for the circuits; asked again whenever
    /// a call fails.
    pub(super) async fn learn_slots(&self, conn: &Connection) {
        if let Connection::Cluster(conn) = conn {
            let _ = self.load(&mut conn.clone()).await;
        }
    }

    /// The call, through the circuit of the node that holds the key (a
    /// call `backend` makes). While it is open the call fails at once, and
    /// one probe at a time (a check of cost 0, on a task of its own) asks
    /// the node again.
    pub(super) async fn call_through(
        self: &Arc<Self>,
        backend: &RedisBackend,
        key: &Key,
        policy: &Policy,
        ask: Ask,
        now: Option<Micros>,
    ) -> Result<(Decision, u64), BackendError> {
        let Connection::Cluster(conn) = &backend.link.conn else {
            return backend.call_now(key, policy, ask, now).await;
        };
        let circuit = self.circuit(script::key_slot(&backend.link.names, key));
        let pass = circuit.as_ref().map_or(Pass::Closed, |c| c.pass());
        match (pass, circuit) {
            (Pass::Closed, circuit) => {
                let result = backend.call_now(key, policy, ask, now).await;
                if let Some(circuit) = &circuit {
                    circuit.record(&result, false);
                }
                if result.as_ref().is_err_and(|e| !e.is_about_one_key()) {
                    self.refresh(conn);
                }
                result
            }
            (Pass::Probe(probe), Some(circuit)) => {
                let (this, backend) = (Arc::clone(self), backend.clone());
                let (key, policy) = (key.clone(), policy.clone());
                tokio::spawn(async move {
                    let result = backend.call_now(&key, &policy, Ask::Check(0), None).await;
                    if let (Err(_), Connection::Cluster(conn)) = (&result, &backend.link.conn) {
                        this.refresh(conn);
                    }
                    probe.finished(&result);
                });
                Err(circuit.refusal())
            }
            (_, Some(circuit)) => Err(circuit.refusal()),
            // No circuit, no pass but Closed.
            (_, None) => backend.call_now(key, policy, ask, now).await,
        }
    }
}
