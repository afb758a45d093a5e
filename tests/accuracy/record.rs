//! The run's history: every decision and every fault, written as the two
//! CSV files `scripts/accuracy-check` reads (their columns are documented
//! there).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::servers::Applied;

pub struct Recorder {
    zero: Instant,
    unix_us: u128,
    decisions: Mutex<String>,
    events: Mutex<String>,
}

/// One decision as a client saw it.
pub struct Decided<'a> {
    pub sent: u64,
    pub received: u64,
    pub server: usize,
    pub key: &'a str,
    pub applied: &'a Applied,
    pub admitted: bool,
    pub origin: &'static str,
}

impl Recorder {
    /// A history starting now; `start` says what the run is.
    pub fn new(topology: &str, servers: usize, tolerance_us: u64) -> Self {
        let recorder = Self {
            zero: Instant::now(),
            unix_us: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_micros(),
            decisions: Mutex::new(String::from(
                "sent_us,received_us,server,key,algorithm,limit,window_us,burst,admitted,origin\n",
            )),
            events: Mutex::new(String::from("at_us,kind,server,detail\n")),
        };
        let detail = format!(
            "topology={topology} servers={servers} unix_us={} tolerance_us={tolerance_us}",
            recorder.unix_us
        );
        recorder.event_at(0, "start", None, &detail);
        recorder
    }

    /// µs since the run began.
    pub fn now(&self) -> u64 {
        u64::try_from(self.zero.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub fn decision(&self, d: &Decided<'_>) {
        let line = format!(
            "{},{},{},{},{},{},{},{},{},{}\n",
            d.sent,
            d.received,
            d.server,
            d.key,
            d.applied.algorithm,
            d.applied.limit,
            d.applied.window_us,
            d.applied.burst,
            u8::from(d.admitted),
            d.origin
        );
        self.decisions.lock().unwrap().push_str(&line);
    }

    /// An event now, on one server or (`None`) the store; its time.
    pub fn event(&self, kind: &str, server: Option<usize>, detail: &str) -> u64 {
        let at = self.now();
        self.event_at(at, kind, server, detail);
        at
    }

    pub fn event_at(&self, at: u64, kind: &str, server: Option<usize>, detail: &str) {
        let server = server.map_or(-1, |s| s as i64);
        let mut events = self.events.lock().unwrap();
        let _ = writeln!(events, "{at},{kind},{server},{detail}");
    }

    pub fn decisions(&self) -> usize {
        self.decisions.lock().unwrap().lines().count() - 1
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("decisions.csv"), &*self.decisions.lock().unwrap())?;
        std::fs::write(dir.join("events.csv"), &*self.events.lock().unwrap())
    }
}
