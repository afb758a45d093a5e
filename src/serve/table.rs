//! The connections open now, by client and by network: whether one more
//! fits, and which idle one makes room for it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use super::limits::{ConnectionLimits, NetworkCap};
use crate::key::canonical;

/// Why a new connection was closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Every connection is open and busy.
    Connections,
    /// Its client's are.
    Client,
    /// Its network's are.
    Network,
}

impl Refused {
    #[cfg(feature = "metrics")]
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Connections => "connections",
            Self::Client => "client",
            Self::Network => "network",
        }
    }
}

/// The open connections, and the caps they are held to.
#[derive(Debug)]
pub(super) struct Table {
    open: Mutex<Open>,
    max_connections: usize,
    max_per_client: usize,
    per_network: Option<NetworkCap>,
    /// Zero of [`Slot::last_active`]'s clock.
    started: Instant,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    slots: HashMap<u64, Arc<Slot>>,
    by_client: HashMap<IpAddr, Vec<u64>>,
    by_network: HashMap<IpAddr, Vec<u64>>,
}

/// One open connection as the table sees it.
#[derive(Debug)]
pub(super) struct Slot {
    id: u64,
    /// Requests under way: from the moment hyper hands one over until its
    /// response body ends. An upgraded connection stays busy for good.
    busy: AtomicUsize,
    /// When it was last busy, in microseconds since `started`.
    last_active: AtomicU64,
    /// The table's zero of time, copied: a request's end reads the clock
    /// without reaching the table.
    started: Instant,
    /// Told when the table closed it to make room.
    pub(super) close: Notify,
    client: Option<IpAddr>,
    network: Option<IpAddr>,
}

impl Slot {
    /// No request under way: it is reading its first headers, or idle
    /// between requests.
    pub(super) fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }
}

/// A connection's place in the table, given back when dropped (when its
/// socket closes, upgraded or not).
#[derive(Debug)]
pub(super) struct Registration {
    pub(super) slot: Arc<Slot>,
    table: Arc<Table>,
}

/// A request under way on a connection: it is not idle until this drops.
#[derive(Debug)]
pub(super) struct Busy(Arc<Slot>);

impl Busy {
    /// The connection was handed to another protocol (a WebSocket): it is
    /// never idle again, so never closed to make room.
    pub(super) fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let slot = &self.0;
        slot.last_active
            .store(micros_since(slot.started), Ordering::Release);
        slot.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Microseconds from `started` until now.
fn micros_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl Table {
    pub(super) fn new(limits: &ConnectionLimits) -> Self {
        Self {
            open: Mutex::default(),
            max_connections: limits.max_connections,
            max_per_client: limits.max_per_client,
            per_network: limits.per_network,
            started: Instant::now(),
        }
    }

    /// A place for a new connection from `ip` (`capped`: held to the caps
    /// per client and network too). Where a cap is reached, the connection
    /// idle longest under it is closed to make room; where all are busy,
    /// the new one is refused. At most one is closed: the groups nest, so
    /// the narrowest full group's idle connection frees a place in each.
    pub(super) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        capped: bool,
    ) -> Result<Registration, Refused> {
        let (client, network) = if capped {
            (
                Some(client_of(ip)),
                self.per_network.map(|cap| network_of(ip, cap)),
            )
        } else {
            (None, None)
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let full = |ids: Option<&Vec<u64>>, max: usize| ids.is_some_and(|ids| ids.len() >= max);
        let room = if let Some(client) =
            client.filter(|c| full(open.by_client.get(c), self.max_per_client))
        {
            Some((
                open.idle_longest(open.by_client[&client].iter()),
                Refused::Client,
            ))
        } else if let Some(network) = network.filter(|n| {
            self.per_network
                .is_some_and(|cap| full(open.by_network.get(n), cap.max))
        }) {
            Some((
                open.idle_longest(open.by_network[&network].iter()),
                Refused::Network,
            ))
        } else if open.slots.len() >= self.max_connections {
            Some((open.idle_longest(open.slots.keys()), Refused::Connections))
        } else {
            None
        };
        if let Some((idle, refused)) = room {
            let victim = idle.ok_or(refused)?;
            if let Some(slot) = open.remove(victim) {
                slot.close.notify_one();
                #[cfg(feature = "metrics")]
                metrics::counter!("ratelimit_connections_closed_total", "reason" => "made_room")
                    .increment(1);
            }
        }
        let id = open.next_id;
        open.next_id += 1;
        let slot = Arc::new(Slot {
            id,
            busy: AtomicUsize::new(0),
            last_active: AtomicU64::new(micros_since(self.started)),
            started: self.started,
            close: Notify::new(),
            client,
            network,
        });
        open.slots.insert(id, slot.clone());
        if let Some(client) = client {
            open.by_client.entry(client).or_default().push(id);
        }
        if let Some(network) = network {
            open.by_network.entry(network).or_default().push(id);
        }
        #[cfg(feature = "metrics")]
        metrics::gauge!("ratelimit_connections_open").set(open.slots.len() as f64);
        Ok(Registration {
            slot,
            table: self.clone(),
        })
    }

    /// Open connections now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .slots
            .len()
    }
}

impl Open {
    /// Of `ids`, the connection with no request under way that was busy
    /// least recently (or opened earliest, never busy).
    fn idle_longest<'a>(&self, ids: impl Iterator<Item = &'a u64>) -> Option<u64> {
        ids.filter_map(|id| self.slots.get(id))
            .filter(|slot| slot.is_idle())
            .min_by_key(|slot| (slot.last_active.load(Ordering::Acquire), slot.id))
            .map(|slot| slot.id)
    }

    fn remove(&mut self, id: u64) -> Option<Arc<Slot>> {
        let slot = self.slots.remove(&id)?;
        let forget = |groups: &mut HashMap<IpAddr, Vec<u64>>, group: Option<IpAddr>| {
            let Some(group) = group else { return };
            if let Some(ids) = groups.get_mut(&group) {
                ids.retain(|other| *other != id);
                if ids.is_empty() {
                    groups.remove(&group);
                }
            }
        };
        forget(&mut self.by_client, slot.client);
        forget(&mut self.by_network, slot.network);
        Some(slot)
    }
}

impl Registration {
    /// A request begins on this connection.
    pub(super) fn enter(&self) -> Busy {
        self.slot.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.slot.clone())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut open = self
            .table
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Already gone if the table closed it to make room.
        open.remove(self.slot.id);
        #[cfg(feature = "metrics")]
        metrics::gauge!("ratelimit_connections_open").set(open.slots.len() as f64);
    }
}

/// Whom a connection counts against: an IPv4 address, or an IPv6 /64 (an
/// IPv4 address mapped into IPv6 is that IPv4 address).
fn client_of(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => IpAddr::V6(masked_v6(v6, 64)),
    }
}

/// The network of `cap`'s prefix that `ip` is in.
fn network_of(ip: IpAddr, cap: NetworkCap) -> IpAddr {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let mask = u32::MAX << (32 - u32::from(cap.v4_prefix));
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => IpAddr::V6(masked_v6(v6, cap.v6_prefix)),
    }
}

/// `v6`'s first `bits` bits (1 to 127).
fn masked_v6(v6: Ipv6Addr, bits: u8) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(v6) & (u128::MAX << (128 - u32::from(bits))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(limits: ConnectionLimits) -> Arc<Table> {
        Arc::new(Table::new(&limits))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_full_client_makes_room_by_its_idle_connection_longest_idle() {
        let table = table(
            ConnectionLimits::builder()
                .max_connections(10)
                .max_per_client(3)
                .build()
                .unwrap(),
        );
        let held: Vec<_> = (0..3)
            .map(|_| table.admit(ip("192.0.2.1"), true).unwrap())
            .collect();
        // The first is busy, the second was busy a moment ago: the third,
        // never busy, is the one closed.
        let _busy = held[0].enter();
        // (A millisecond on: its end is later than the third's opening.)
        std::thread::sleep(std::time::Duration::from_millis(1));
        drop(held[1].enter());
        let fourth = table.admit(ip("192.0.2.1"), true).unwrap();
        assert_eq!(table.len(), 3);
        assert!(held[1].slot.close.notified().now_or_never_is_none());
        assert!(!held[2].slot.close.notified().now_or_never_is_none());
        // All busy: the next is refused, and another address is not.
        let _busy = [held[1].enter(), fourth.enter()];
        assert_eq!(
            table.admit(ip("192.0.2.1"), true).unwrap_err(),
            Refused::Client
        );
        assert!(table.admit(ip("192.0.2.2"), true).is_ok());
    }

    #[test]
    fn one_ipv6_slash_64_is_one_client_and_a_network_caps_its_clients() {
        let table = table(
            ConnectionLimits::builder()
                .max_connections(100)
                .max_per_client(2)
                .max_per_network(24, 48, 4)
                .build()
                .unwrap(),
        );
        let mut held = Vec::new();
        for host in 1..=2 {
            let r = table
                .admit(ip(&format!("2001:db8:1:2::{host}")), true)
                .unwrap();
            held.push((r.enter(), r));
        }
        assert_eq!(
            table.admit(ip("2001:db8:1:2:ffff::9"), true).unwrap_err(),
            Refused::Client
        );
        // Another /64 of the same /48: two more fit, then the network is full.
        for host in 1..=2 {
            let r = table
                .admit(ip(&format!("2001:db8:1:3::{host}")), true)
                .unwrap();
            held.push((r.enter(), r));
        }
        assert_eq!(
            table.admit(ip("2001:db8:1:4::1"), true).unwrap_err(),
            Refused::Network
        );
        assert!(table.admit(ip("2001:db8:2::1"), true).is_ok());
        // IPv4 by /24; a mapped address is its IPv4 address.
        for host in 1..=4 {
            let r = table
                .admit(ip(&format!("198.51.100.{host}")), true)
                .unwrap();
            held.push((r.enter(), r));
        }
        assert_eq!(
            table.admit(ip("::ffff:198.51.100.77"), true).unwrap_err(),
            Refused::Network
        );
    }

    #[test]
    fn the_cap_in_all_closes_the_idle_connection_idle_longest_anywhere() {
        let table = table(
            ConnectionLimits::builder()
                .max_connections(3)
                .max_per_client(3)
                .build()
                .unwrap(),
        );
        let proxy = table.admit(ip("10.0.0.1"), false).unwrap();
        let a = table.admit(ip("192.0.2.1"), true).unwrap();
        let b = table.admit(ip("192.0.2.2"), true).unwrap();
        let _busy = [a.enter(), b.enter()];
        let c = table.admit(ip("192.0.2.3"), true).unwrap();
        assert!(!proxy.slot.close.notified().now_or_never_is_none());
        let _busy = c.enter();
        assert_eq!(
            table.admit(ip("192.0.2.4"), true).unwrap_err(),
            Refused::Connections
        );
        // A connection that ends gives its place back.
        drop(_busy);
        drop(c);
        assert!(table.admit(ip("192.0.2.4"), true).is_ok());
    }

    /// The smallest server: one connection in all. An idle one gives its
    /// place to the next; a busy one keeps it, and the next is refused;
    /// once it ends, the place is free.
    #[test]
    fn at_one_connection_the_idle_one_gives_way_and_the_busy_one_stays() {
        let table = table(
            ConnectionLimits::builder()
                .max_connections(1)
                .build()
                .unwrap(),
        );
        assert_eq!(table.max_per_client, 1);
        let first = table.admit(ip("192.0.2.1"), true).unwrap();
        let second = table.admit(ip("192.0.2.2"), true).unwrap();
        assert!(!first.slot.close.notified().now_or_never_is_none());
        assert_eq!(table.len(), 1);
        let busy = second.enter();
        assert_eq!(
            table.admit(ip("192.0.2.3"), true).unwrap_err(),
            Refused::Connections
        );
        drop(busy);
        drop(second);
        assert_eq!(table.len(), 0);
        assert!(table.admit(ip("192.0.2.3"), true).is_ok());
    }

    /// Whether a `Notified` future would wait: `true` while no close was
    /// asked for.
    trait NowOrNever {
        fn now_or_never_is_none(self) -> bool;
    }

    impl NowOrNever for tokio::sync::futures::Notified<'_> {
        fn now_or_never_is_none(self) -> bool {
            let mut notified = std::pin::pin!(self);
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            std::future::Future::poll(notified.as_mut(), &mut cx).is_pending()
        }
    }
}
