//! Where the in-memory backend gets the time.
//!
//! Algorithms take `now` as an argument; a [`Clock`] supplies it, as
//! [`Micros`]. [`MonotonicClock`] is the default: it never goes back (by
//! more than a microsecond), keeps to the operating system's clock, and
//! counts from the Unix epoch, so windows line up with wall-clock minutes
//! and hours. [`ManualClock`] moves only when told to, for tests.
//!
//! ```
//! use std::time::Duration;
//! use tower_ratelimit::clock::{Clock, ManualClock, Micros};
//!
//! let clock = ManualClock::new(Micros::ZERO);
//! let seen_by_backend = clock.clone();
//! clock.advance(Duration::from_millis(1500));
//! assert_eq!(seen_by_backend.now(), Micros::from_millis(1500));
//! ```

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) mod micros;

pub use micros::Micros;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The time since this clock's epoch; never decreases (the default
    /// clock: by more than a microsecond, when it slows to follow the
    /// operating system's clock).
    fn now(&self) -> Micros;
}

/// A monotonic clock, reported as microseconds since the Unix epoch as of
/// when the clock was made. Later changes to the wall clock do not move it.
///
/// It reads the CPU's time-stamp counter through `quanta` where that is
/// reliable (about 10 ns here, against 21 ns for `std::time::Instant`: the
/// clock is the largest single cost of an in-memory decision) and the
/// operating system's monotonic clock elsewhere. The counter's rate is
/// calibrated once, at start-up, and a calibration can be off by hundreds
/// of parts per million (200 ppm was seen in a debug build: 0.7 s an hour,
/// windows drifting away from the wall clock's and Redis's), so every
/// 131 ms that it is read the clock corrects its course against the
/// operating system's monotonic clock, spreading the correction over the
/// next 131 ms: it never steps back, and it is off by at most the drift
/// of the time since its last correction (26 µs at 200 ppm when read
/// often). A reading between corrections is the raw counter scaled by two
/// multiplications, with no conversion through `Duration`.
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    /// The operating system's monotonic clock when the counter's first
    /// reading was taken: what the counter is corrected to.
    reference: std::time::Instant,
    start: Micros,
    calibration: Calibration,
    course: Arc<Course>,
}

/// How often the course is corrected, in µs: about 131 ms.
const CORRECT_EVERY: u64 = 1 << 17;

/// A rate's fixed point: µs per 2^40 ticks of the counter.
const RATE_BITS: u32 = 40;

/// The counter's rate as calibrated, in µs per 2^40 of its ticks (not
/// corrected: the course's slews do that), and its ticks in
/// [`CORRECT_EVERY`] µs at that rate.
#[derive(Clone, Copy, Debug)]
struct Calibration {
    rate: u64,
    period: u64,
}

impl Calibration {
    fn new(rate: u64) -> Self {
        let rate = rate.max(1);
        let period = u64::try_from((u128::from(CORRECT_EVERY) << RATE_BITS) / u128::from(rate))
            .unwrap_or(u64::MAX);
        Self { rate, period }
    }
}

/// The clock's µs since `start` as a line through the counter's ticks:
/// `at` when the counter read `from`, then at the counter's calibrated
/// rate, gaining `slew` µs per 2^40 ticks (or losing, negative) over the
/// first [`CORRECT_EVERY`] µs after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Line {
    from: u64,
    at: u64,
    slew: i64,
}

impl Line {
    /// At the counter's reading `counted`, for a counter of `calibration`.
    #[inline]
    fn at(self, counted: u64, calibration: Calibration) -> u64 {
        let Calibration { rate, period } = calibration;
        let since = counted.saturating_sub(self.from);
        // One sum, then one shift: two rounded terms could step back.
        let gone = (i128::from(since) * i128::from(rate)
            + i128::from(since.min(period)) * i128::from(self.slew))
            >> RATE_BITS;
        let gone = u64::try_from(gone.max(0)).unwrap_or(u64::MAX);
        self.at.saturating_add(gone)
    }

    /// The line from `counted` on that heads for `truth`: continuous with
    /// this one, gaining or losing what it is off over the next
    /// `CORRECT_EVERY` µs, at most half of it; a clock behind by more than
    /// that can make up jumps ahead.
    fn corrected(self, counted: u64, truth: u64, calibration: Calibration) -> Line {
        let now = self.at(counted, calibration);
        let error = truth as i64 - now as i64;
        let most = CORRECT_EVERY as i64 / 2;
        if error > most {
            return Line {
                from: counted,
                at: truth,
                slew: 0,
            };
        }
        // At most half the rate either way: it fits.
        let slew =
            i128::from(calibration.rate) * i128::from(error.max(-most)) / i128::from(CORRECT_EVERY);
        Line {
            from: counted,
            at: now,
            slew: i64::try_from(slew).unwrap_or(0),
        }
    }
}

/// The clock's `Line`, shared by its clones, behind a sequence lock: a
/// reader reads it again when a correction was written meanwhile.
#[derive(Debug, Default)]
struct Course {
    /// Odd while a correction is written.
    seq: AtomicU64,
    from: AtomicU64,
    at: AtomicU64,
    slew: AtomicI64,
}

impl Course {
    fn new(line: Line) -> Self {
        Self {
            seq: AtomicU64::new(0),
            from: AtomicU64::new(line.from),
            at: AtomicU64::new(line.at),
            slew: AtomicI64::new(line.slew),
        }
    }

    #[inline]
    fn read(&self) -> Line {
        loop {
            let seq = self.seq.load(Ordering::Acquire);
            let line = self.fields();
            fence(Ordering::Acquire);
            if seq & 1 == 0 && self.seq.load(Ordering::Relaxed) == seq {
                return line;
            }
            std::hint::spin_loop();
        }
    }

    #[inline]
    fn fields(&self) -> Line {
        Line {
            from: self.from.load(Ordering::Relaxed),
            at: self.at.load(Ordering::Relaxed),
            slew: self.slew.load(Ordering::Relaxed),
        }
    }

    /// Heads the line for `truth` from the counter's reading `counted`,
    /// unless another caller is correcting it, or has since `counted`.
    fn correct(&self, counted: u64, truth: u64, calibration: Calibration) {
        let seq = self.seq.load(Ordering::Relaxed);
        // Claimed only from an even number: an odd one is a write under way.
        if seq & 1 == 1
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        let line = self.fields();
        if counted >= line.from.saturating_add(calibration.period) {
            let line = line.corrected(counted, truth, calibration);
            self.from.store(line.from, Ordering::Relaxed);
            self.at.store(line.at, Ordering::Relaxed);
            self.slew.store(line.slew, Ordering::Relaxed);
        }
        self.seq.store(seq + 2, Ordering::Release);
    }
}

impl MonotonicClock {
    /// A clock reading the wall time once, now, and counting monotonically from it.
    pub fn new() -> Self {
        // Calibrates the counter (milliseconds, the first time in a
        // process) before the three readings, which are then taken together.
        let clock = quanta::Clock::new();
        // The calibration, read back: 2^40 ticks in ns, so in µs.
        let calibration = Calibration::new(clock.delta_as_nanos(0, 1 << RATE_BITS) / 1_000);
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let reference = std::time::Instant::now();
        let started = clock.raw();
        Self {
            clock,
            reference,
            start: Micros::from(since_epoch),
            calibration,
            course: Arc::new(Course::new(Line {
                from: started,
                at: 0,
                slew: 0,
            })),
        }
    }

    /// The course corrected at the counter's reading `counted` (by this
    /// caller or another).
    #[cold]
    #[inline(never)]
    fn corrected(&self, counted: u64) -> Line {
        let truth = micros_in(self.reference.elapsed());
        self.course.correct(counted, truth, self.calibration);
        self.course.read()
    }
}

#[inline]
fn micros_in(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Micros {
        let counted = self.clock.raw();
        let mut line = self.course.read();
        if counted >= line.from.saturating_add(self.calibration.period) {
            line = self.corrected(counted);
        }
        let at = line.at(counted, self.calibration);
        Micros::new(self.start.as_u64().saturating_add(at))
    }
}

/// A clock that moves only when told; clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `now`.
    pub fn new(now: Micros) -> Self {
        Self(Arc::new(AtomicU64::new(now.as_u64())))
    }

    /// Move forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0
            .fetch_add(Micros::from(by).as_u64(), Ordering::SeqCst);
    }

    /// Set the time to `now` (tests may go anywhere, even backwards).
    pub fn set(&self, now: Micros) {
        self.0.store(now.as_u64(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        Micros::new(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter calibrated `ppm` parts per million fast (or, negative,
    /// slow), read every `every` µs for 10 s and corrected as the clock
    /// does: the worst distance from the truth, and the largest step back.
    fn follow(ppm: i64, every: u64) -> (u64, i64) {
        // A tick a µs as calibrated.
        let calibration = Calibration::new(1 << RATE_BITS);
        let mut line = Line::default();
        let (mut worst, mut back, mut last) = (0u64, 0i64, 0i64);
        for truth in (0..10_000_000u64).step_by(every as usize) {
            let counted = (truth as i64 + truth as i64 * ppm / 1_000_000) as u64;
            if counted >= line.from + CORRECT_EVERY {
                line = line.corrected(counted, truth, calibration);
            }
            let now = line.at(counted, calibration);
            worst = worst.max(now.abs_diff(truth));
            back = back.max(last - now as i64);
            last = now as i64;
        }
        (worst, back)
    }

    #[test]
    fn a_miscalibrated_counter_keeps_to_the_system_clock_and_never_steps_back() {
        for ppm in [-5_000, -200, 0, 200, 5_000] {
            // Read often: off by the drift of 100 ms at most (uncorrected,
            // 200 ppm is 2 ms off after these 10 s).
            let (worst, back) = follow(ppm, 100);
            let bound = ppm.unsigned_abs() * 2 * CORRECT_EVERY / 1_000_000 + 2;
            assert!(worst <= bound, "{ppm} ppm: {worst} µs from the truth");
            assert_eq!(back, 0, "{ppm} ppm: stepped back");
            // Read every 2 s: off by the drift since the last reading.
            let (worst, back) = follow(ppm, 2_000_000);
            assert!(
                worst <= ppm.unsigned_abs() * 2 + 2,
                "{ppm} ppm, rare: {worst} µs"
            );
            assert_eq!(back, 0, "{ppm} ppm, rare: stepped back");
        }
    }

    /// Threads correcting and reading one course at once: every reading
    /// is a line a correction wrote, never a mix of two (each line written
    /// here has `at` twice its `from`), and none reads a later correction
    /// before an earlier one.
    #[test]
    fn a_course_read_while_corrected_is_never_torn() {
        let course = Arc::new(Course::default());
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let course = course.clone();
                std::thread::spawn(move || {
                    for n in 1..200_000u64 {
                        let from = (n * 2 + w) * CORRECT_EVERY;
                        // Truth at twice the counter: `at` is twice `from`.
                        let still = Calibration {
                            rate: 0,
                            period: CORRECT_EVERY,
                        };
                        course.correct(from, 2 * from, still);
                    }
                })
            })
            .collect();
        let mut last = 0;
        while writers.iter().any(|w| !w.is_finished()) {
            let line = course.read();
            if line.from > 0 {
                assert_eq!(line.at, 2 * line.from, "a torn line: {line:?}");
            }
            assert!(line.from >= last, "read {} after {last}", line.from);
            last = line.from;
        }
        for w in writers {
            w.join().unwrap();
        }
    }

    #[test]
    fn a_counter_far_behind_catches_up_at_once() {
        let calibration = Calibration::new(1 << RATE_BITS);
        let line = Line::default().corrected(1_000_000, 3_000_000, calibration);
        assert_eq!(line.at(1_000_000, calibration), 3_000_000);
    }

    #[test]
    fn the_clock_reads_the_wall_time_and_keeps_to_the_system_clock() {
        let clock = MonotonicClock::new();
        let wall = micros_in(SystemTime::now().duration_since(UNIX_EPOCH).unwrap());
        let now = clock.now().as_u64();
        // A busy machine may stall a thread between the two readings.
        assert!(now.abs_diff(wall) < 1_000_000, "{now} against {wall}");
        let (mut last, start) = (now, std::time::Instant::now());
        while start.elapsed() < Duration::from_millis(250) {
            let t = clock.now().as_u64();
            assert!(t >= last, "stepped back from {last} to {t}");
            last = t;
        }
        let followed = micros_in(clock.reference.elapsed());
        let read = clock.now().as_u64() - clock.start.as_u64();
        assert!(read.abs_diff(followed) < 5_000, "{read} against {followed}");
    }
}
