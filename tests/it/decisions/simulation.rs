//! `cargo run --example simulate`: the admitted counts it prints, and the
//! chart committed in docs/ is the one it draws.

use crate::simulate::{admitted, scenarios, svg, table};
use tower_ratelimit::Algorithm;

#[test]
fn each_algorithm_admits_what_its_definition_says() {
    let [steady, boundary] = scenarios();
    assert_eq!((steady.times.len(), boundary.times.len()), (150, 200));
    let counts = |s| Algorithm::ALL.map(|a| admitted(a, s).len());
    // The windows hold 100 in the first minute; the buckets start full
    // (100) and refill 100/min, so they take the whole steady 2.4/s.
    assert_eq!(counts(&steady), [100, 100, 100, 150, 150, 150]);
    // The boundary burst: a fixed window admits both hundreds; the log
    // none of the second; the counter ~1 (its weight of the first minute
    // is 59/60); the buckets what refilled in 2 s (3).
    assert_eq!(counts(&boundary), [200, 100, 101, 103, 103, 103]);
    assert!(table(&[steady, boundary]).contains("fixed-window      |"));
}

#[test]
fn the_committed_chart_is_the_one_the_example_draws() {
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/algorithms.svg"))
            .unwrap();
    assert!(
        committed == svg(&scenarios()),
        "docs/algorithms.svg is stale: run `cargo run --example simulate`"
    );
    assert!(committed.starts_with("<svg ") && committed.trim_end().ends_with("</svg>"));
}
