//! The example's Prometheus alerting rules are valid (`promtool check
//! rules`). That each fires on the series the crate emits, with the labels
//! its annotations read, is `dashboard.rs`'s: it evaluates them in a real
//! Prometheus scraping the example server.

use std::process::Command;

const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/prometheus/alerts.yml"
);

#[test]
fn the_alerting_rules_are_valid() {
    if crate::support::needed("promtool", "promtool", "apt-get install prometheus") {
        let out = Command::new("promtool")
            .args(["check", "rules", RULES])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
