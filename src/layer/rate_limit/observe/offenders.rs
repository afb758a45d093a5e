//! [`TopOffenders`]: the keys denied most, in fixed memory.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use ipnet::IpNet;

use crate::key::Key;

/// The keys a layer denied most often, in fixed memory however many keys
/// there are: the *space-saving* algorithm over `capacity` counters.
///
/// Every key denied more than `1 / capacity` of all denials is in the list;
/// each count is at most `error` above the key's true number of denials
/// (a key that took over a counter inherits its count). Keys are shown
/// redacted ([`Key::redacted`]): enough to tell them apart and recognise
/// one, never a whole IP address or user name.
///
/// Give one to any number of layers ([`RateLimitLayer::top_offenders`]);
/// read it from anywhere:
///
/// ```
/// use tower_ratelimit::{Policy, RateLimitLayer};
/// use tower_ratelimit::layer::TopOffenders;
///
/// let top = TopOffenders::new(100);
/// let layer = RateLimitLayer::new("10/min".parse::<Policy>().unwrap()).top_offenders(top.clone());
/// // Later, from an admin route:
/// for offender in top.top(10) {
///     println!("{} denied {} times", offender.key, offender.count);
/// }
/// ```
///
/// [`RateLimitLayer::top_offenders`]: crate::RateLimitLayer::top_offenders
///
/// Keys of client IPs also count toward their networks (an IPv4 /24, an
/// IPv6 /48), ranked apart ([`top_networks`](Self::top_networks)): a subnet
/// spread over many addresses, each denied a little, shows up there.
#[derive(Clone)]
pub struct TopOffenders {
    keys: Arc<Mutex<Counters>>,
    networks: Arc<Mutex<Counters>>,
}

/// One key in [`TopOffenders::top`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offender {
    /// The key, redacted.
    pub key: String,
    /// Denials counted for it: at most `error` more than the true number.
    pub count: u64,
    /// How much of `count` may belong to keys it replaced.
    pub error: u64,
}

struct Counters {
    capacity: usize,
    entries: Vec<Offender>,
    /// Each entry's key hash, and the entry index by key hash.
    ids: Vec<u64>,
    index: HashMap<u64, usize>,
}

impl TopOffenders {
    /// Track up to `capacity` keys (at least 1), and as many networks.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            keys: Arc::new(Mutex::new(Counters::new(capacity))),
            networks: Arc::new(Mutex::new(Counters::new(capacity))),
        }
    }

    /// Count one denial of `key` (and of its network, for a client IP's).
    pub fn record(&self, key: &Key) {
        lock(&self.keys).record(key.digest(), || key.redacted());
        if let Some(network) = network_of(key) {
            let id = Key::new("network", network.to_string()).digest();
            lock(&self.networks).record(id, || network.to_string());
        }
    }

    /// The `n` most denied keys, most denied first.
    pub fn top(&self, n: usize) -> Vec<Offender> {
        lock(&self.keys).top(n)
    }

    /// The `n` most denied networks of client IPs (IPv4 /24, IPv6 /48),
    /// most denied first.
    pub fn top_networks(&self, n: usize) -> Vec<Offender> {
        lock(&self.networks).top(n)
    }

    /// Forget every count.
    pub fn clear(&self) {
        lock(&self.keys).clear();
        lock(&self.networks).clear();
    }
}

/// The network of a client IP's key: its /24 or /48.
fn network_of(key: &Key) -> Option<IpNet> {
    if key.namespace() != "ip" {
        return None;
    }
    let value = key.value();
    let (addr, prefix) = match value.len() {
        4 => (IpAddr::from(<[u8; 4]>::try_from(value).ok()?), 24),
        16 => (IpAddr::from(<[u8; 16]>::try_from(value).ok()?), 48),
        _ => return None,
    };
    IpNet::new(addr, prefix).ok().map(|net| net.trunc())
}

fn lock(counters: &Mutex<Counters>) -> std::sync::MutexGuard<'_, Counters> {
    // Updates cannot panic half-way, so a poisoned lock is still consistent.
    counters.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Counters {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Vec::with_capacity(capacity),
            ids: Vec::with_capacity(capacity),
            index: HashMap::with_capacity(capacity),
        }
    }

    /// Count one denial of the key `id`, shown as `label()`.
    fn record(&mut self, id: u64, label: impl FnOnce() -> String) {
        let counters = self;
        if let Some(&i) = counters.index.get(&id) {
            counters.entries[i].count += 1;
            return;
        }
        let entry = Offender {
            key: label(),
            count: 1,
            error: 0,
        };
        if counters.entries.len() < counters.capacity {
            counters.index.insert(id, counters.entries.len());
            counters.entries.push(entry);
            counters.ids.push(id);
            return;
        }
        // Full: the least counted key makes way, and its count is inherited.
        let Some((i, least)) = counters
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.count)
        else {
            return;
        };
        let floor = least.count;
        counters.index.remove(&counters.ids[i]);
        counters.index.insert(id, i);
        counters.ids[i] = id;
        counters.entries[i] = Offender {
            count: floor + 1,
            error: floor,
            ..entry
        };
    }

    fn top(&self, n: usize) -> Vec<Offender> {
        let mut entries = self.entries.clone();
        entries.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        entries.truncate(n);
        entries
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.ids.clear();
        self.index.clear();
    }
}

impl fmt::Debug for TopOffenders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counters = lock(&self.keys);
        f.debug_struct("TopOffenders")
            .field("capacity", &counters.capacity)
            .field("tracked", &counters.entries.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_hitters_survive_a_flood_of_one_off_keys_in_fixed_memory() {
        let top = TopOffenders::new(10);
        for round in 0..1_000u32 {
            for heavy in 0..3 {
                top.record(&Key::new("ip", format!("10.0.0.{heavy}")));
            }
            // Two new keys per round: 2,000 in all, 10 counters. Every key
            // above 1/10 of all denials (500) is guaranteed a counter.
            for one_off in 0..2 {
                top.record(&Key::new("ip", format!("one-off {round} {one_off}")));
            }
        }
        let listed = top.top(3);
        assert_eq!(lock(&top.keys).entries.len(), 10);
        let heavy: Vec<String> = (0..3)
            .map(|h| Key::new("ip", format!("10.0.0.{h}")).redacted())
            .collect();
        for offender in &listed {
            assert!(heavy.contains(&offender.key), "{offender:?}");
            // The true count is 1,000: within [count - error, count].
            assert!(offender.count - offender.error <= 1_000 && offender.count >= 1_000);
        }
        let mut keys: Vec<_> = listed.iter().map(|o| o.key.clone()).collect();
        keys.dedup();
        assert_eq!(keys.len(), 3);
    }

    #[test]
    fn a_subnet_spread_over_many_addresses_tops_the_networks() {
        let top = TopOffenders::new(10);
        // 200 addresses of one /24, each denied twice: none stands out...
        for host in 0..200u8 {
            for _ in 0..2 {
                top.record(&Key::new("ip", [198, 51, 100, host]));
            }
        }
        // ...beside one address denied 50 times, and IPv6 from one /48.
        for _ in 0..50 {
            top.record(&Key::new("ip", [192, 0, 2, 7]));
        }
        for host in 0..30u16 {
            let addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0x42, host, 0, 0, 0, 1);
            top.record(&Key::new("ip", addr.octets()));
        }
        top.record(&Key::new("header:x-user-id", "alice"));
        let networks = top.top_networks(3);
        assert_eq!(networks[0].key, "198.51.100.0/24");
        assert!(networks[0].count >= 400);
        assert_eq!(networks[1].key, "192.0.2.0/24");
        assert_eq!(networks[2].key, "2001:db8:42::/48");
        assert_eq!(
            top.top(1)[0].key,
            Key::new("ip", [192, 0, 2, 7]).redacted(),
            "{:?}",
            top.top(1)
        );
    }
}
