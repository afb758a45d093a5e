//! The example's Prometheus alerting rules: valid (`promtool check rules`),
//! and about metrics the crate emits.

use std::path::Path;
use std::process::Command;

const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/prometheus/alerts.yml"
);

#[test]
fn the_alerting_rules_are_valid_and_name_real_metrics() {
    let text = std::fs::read_to_string(RULES).unwrap();
    // Every metric a rule reads is one the crate emits (its name appears
    // in the source, where it is registered).
    let sources = [
        "src/layer/rate_limit/observe/meters.rs",
        "src/backend/health.rs",
        "src/layer/adaptive/limits.rs",
    ]
    .map(|p| std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p)).unwrap())
    .concat();
    for metric in [
        "ratelimit_requests_total",
        "ratelimit_store_failures_total",
        "ratelimit_limit_factor",
    ] {
        assert!(text.contains(metric), "no rule reads {metric}");
        assert!(
            sources.contains(&format!("\"{metric}\"")),
            "{metric} is not emitted"
        );
    }
    for outcome in ["limited", "banned", "fallback_limited", "fallback_allowed"] {
        let observe = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("src/layer/rate_limit/observe/mod.rs"),
        )
        .unwrap();
        assert!(
            observe.contains(&format!("\"{outcome}\"")),
            "no outcome {outcome}"
        );
    }
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
