//! The six algorithms side by side: the same traffic through each, under
//! 100 requests per minute, on a simulated clock.
//!
//! ```sh
//! cargo run --example simulate                  # the table, and docs/algorithms.svg
//! cargo run --example simulate -- chart.svg     # the chart elsewhere
//! ```
//!
//! Two scenarios:
//!
//! * **steady, then a burst**: 140 requests evenly over the first 58
//!   seconds, then 10 at once at t = 58 s (150 in all);
//! * **boundary burst**: 100 requests at 0:59 and 100 more at 1:01, two
//!   seconds apart but in two fixed windows.
//!
//! The table gives how many each algorithm admits; the chart shows when.

use std::fmt::Write as _;

use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::clock::ManualClock;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// A named list of request times, in microseconds.
#[derive(Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub times: Vec<Micros>,
    /// How long the chart shows.
    pub span: Micros,
}

/// The two scenarios of the module docs.
pub fn scenarios() -> [Scenario; 2] {
    let steady = (0..140u64).map(|i| Micros::new(i * 58_000_000 / 140));
    let burst = (0..10).map(|_| Micros::from_secs(58));
    let boundary = (0..100)
        .map(|_| Micros::from_secs(59))
        .chain((0..100).map(|_| Micros::from_secs(61)));
    [
        Scenario {
            name: "steady, then a burst at 58 s",
            times: steady.chain(burst).collect(),
            span: Micros::from_secs(60),
        },
        Scenario {
            name: "boundary burst: 100 at 0:59, 100 at 1:01",
            times: boundary.collect(),
            span: Micros::from_secs(120),
        },
    ]
}

/// The times `algorithm` admits, of `scenario`'s requests, under 100/min.
pub fn admitted(algorithm: Algorithm, scenario: &Scenario) -> Vec<Micros> {
    let quota = Quota::per_minute(100).expect("a valid quota");
    let policy = Policy::single(algorithm, quota).unwrap();
    let clock = ManualClock::new(Micros::ZERO);
    let backend = MemoryBackend::builder().clock(clock.clone()).build();
    let key = Key::new("user", "simulated");
    scenario
        .times
        .iter()
        .copied()
        .filter(|&t| {
            clock.set(t);
            backend.check_now(&key, &policy, 1).is_allowed()
        })
        .collect()
}

/// The table: admitted per algorithm and scenario.
pub fn table(scenarios: &[Scenario]) -> String {
    let mut out = String::from("algorithm        ");
    for s in scenarios {
        let _ = write!(
            out,
            " | {:>44}",
            format!("{} ({} sent)", s.name, s.times.len())
        );
    }
    out.push('\n');
    for algorithm in Algorithm::ALL {
        let _ = write!(out, "{:<17}", algorithm.to_string());
        for s in scenarios {
            let _ = write!(out, " | {:>44}", admitted(algorithm, s).len());
        }
        out.push('\n');
    }
    out
}

const COLOURS: [&str; 6] = [
    "#d1495b", "#edae49", "#66a182", "#00798c", "#30638e", "#8d6a9f",
];

/// The chart: per scenario, a panel per algorithm of requests admitted
/// over time (cumulative), against the requests sent (grey).
pub fn svg(scenarios: &[Scenario]) -> String {
    let (panel_w, panel_h, gap, left, top) = (420.0, 90.0, 22.0, 120.0, 50.0);
    let width = left + scenarios.len() as f64 * (panel_w + 40.0) + 10.0;
    let height = top + 6.0 * (panel_h + gap) + 30.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="20" font-size="15" font-weight="bold">Requests admitted over time under 100/min (grey: sent)</text>"#
    );
    for (column, scenario) in scenarios.iter().enumerate() {
        let x0 = left + column as f64 * (panel_w + 40.0);
        let _ = writeln!(
            out,
            r#"<text x="{x0}" y="40" font-weight="bold">{}</text>"#,
            scenario.name
        );
        let most = scenario.times.len() as f64;
        let span = scenario.span.as_u64() as f64;
        let x = |t: Micros| x0 + t.as_u64() as f64 / span * panel_w;
        for (row, algorithm) in Algorithm::ALL.into_iter().enumerate() {
            let y0 = top + row as f64 * (panel_h + gap);
            let y = |n: usize| y0 + panel_h - n as f64 / most * panel_h;
            if column == 0 {
                let _ = writeln!(
                    out,
                    r#"<text x="{}" y="{}" text-anchor="end">{algorithm}</text>"#,
                    left - 10.0,
                    y0 + panel_h / 2.0
                );
            }
            let _ = writeln!(
                out,
                r##"<rect x="{x0}" y="{y0}" width="{panel_w}" height="{panel_h}" fill="none" stroke="#bbb"/>"##
            );
            let admitted = admitted(algorithm, scenario);
            let sent = step_path(&scenario.times, scenario.span, &x, &y);
            let kept = step_path(&admitted, scenario.span, &x, &y);
            let _ = writeln!(
                out,
                r##"<path d="{sent}" fill="none" stroke="#aaa" stroke-width="1.5" stroke-dasharray="4 3"/>"##
            );
            let _ = writeln!(
                out,
                r#"<path d="{kept}" fill="none" stroke="{}" stroke-width="2.5"/>"#,
                COLOURS[row]
            );
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" fill="{}">{} admitted</text>"#,
                x0 + 6.0,
                y0 + 16.0,
                COLOURS[row],
                admitted.len()
            );
        }
        // The time axis, under the last panel.
        let y_axis = top + 6.0 * (panel_h + gap) - gap + 14.0;
        let step = if span > 60e6 { 20 } else { 10 };
        for s in (0..=scenario.span.as_secs_ceil()).step_by(step) {
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{y_axis}" text-anchor="middle" fill="#555">{s} s</text>"##,
                x(Micros::from_secs(s))
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

/// A cumulative step line through `times` (sorted), to the end of `span`.
fn step_path(
    times: &[Micros],
    span: Micros,
    x: &impl Fn(Micros) -> f64,
    y: &impl Fn(usize) -> f64,
) -> String {
    let mut d = format!("M{:.1},{:.1}", x(Micros::ZERO), y(0));
    for (i, &t) in times.iter().enumerate() {
        let _ = write!(d, " H{:.1} V{:.1}", x(t), y(i + 1));
    }
    let _ = write!(d, " H{:.1}", x(span));
    d
}

#[allow(dead_code)] // tests include this file for its functions
fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "docs/algorithms.svg".to_owned());
    let scenarios = scenarios();
    print!("{}", table(&scenarios));
    if let Some(dir) = std::path::Path::new(&path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, svg(&scenarios))?;
    println!("\nchart written to {path}");
    Ok(())
}
