//! `examples/grafana/dashboard.json` and `examples/prometheus/alerts.yml`
//! over real series: Debian's Prometheus scrapes the example server (on
//! Redis, its metrics through the Prometheus exporter's recorder) while it
//! refuses, adapts and loses its Redis. Every query of every panel must
//! parse and return at least one series through Prometheus's HTTP API, and
//! every alert rule must fire here, with the labels its annotations name.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::example::{plain_request, ExampleServer};
use crate::support::redis::temp_dir;
use crate::support::{needed, RedisServer};

/// A Prometheus scraping one target every second, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    /// Scraping the server on `target`, with the admin's bearer `token`
    /// (`/metrics` is the admin's when `ADMIN_TOKEN` is set).
    fn scraping(target: u16, token: &str) -> Self {
        let port = RedisServer::unused_port();
        let dir = temp_dir("prometheus");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
                 scrape_configs:\n  - job_name: example\n    authorization: {{ credentials: '{token}' }}\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let prometheus = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !prometheus.get("/-/ready").contains("200 OK") {
            assert!(Instant::now() < deadline, "prometheus did not get ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    /// `GET path`: the whole response as text.
    fn get(&self, path: &str) -> String {
        plain_request(self.port, "GET", path, &[], "")
    }

    /// The result of an instant query.
    fn query(&self, expr: &str) -> Value {
        let encoded: String = expr
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let response = self.get(&format!("/api/v1/query?query={encoded}"));
        let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        serde_json::from_str(body).unwrap_or(Value::Null)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every query of every panel.
fn panel_queries() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grafana/dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut queries = Vec::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expression");
            queries.push((title.clone(), expr.to_owned()));
        }
    }
    queries
}

/// Every alert rule: its name, its expression, and the labels its
/// annotations read (`$labels.route`).
fn alert_rules() -> Vec<(String, String, Vec<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/prometheus/alerts.yml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut rules: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            rules.push((name.trim().to_owned(), String::new(), Vec::new()));
        } else if let Some(expr) = trimmed.strip_prefix("expr: ") {
            let rule = rules.last_mut().expect("an expr belongs to an alert");
            if expr.trim() == "|" {
                let indent = line.len() - trimmed.len();
                while let Some(more) = lines.next_if(|l| l.len() - l.trim_start().len() > indent) {
                    rule.1.push_str(more.trim());
                    rule.1.push(' ');
                }
            } else {
                rule.1 = expr.trim().to_owned();
            }
        }
        if let Some(rule) = rules.last_mut() {
            let mut rest = line;
            while let Some(at) = rest.find("$labels.") {
                let label: String = rest[at + 8..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rule.2.push(label);
                rest = &rest[at + 8..];
            }
        }
    }
    rules
}

#[test]
fn every_panel_and_alert_rule_sees_series_of_the_example_server() {
    if !needed("prometheus", "prometheus", "apt-get install prometheus") {
        return;
    }
    let queries = panel_queries();
    assert!(queries.len() >= 10, "{queries:?}");
    let rules = alert_rules();
    assert_eq!(rules.len(), 6, "{rules:?}");

    let mut redis = RedisServer::start();
    let url = redis.url();
    let server = ExampleServer::start(&[
        ("REDIS_URL", url.as_str()),
        ("ADMIN_TOKEN", "s3cret"),
        ("ADAPTIVE_WINDOW_MS", "1000"),
        // The report's readers are many addresses behind this proxy: the
        // adaptive window weighs clients by address.
        ("TRUSTED_PROXIES", "127.0.0.1/32"),
        // One a second, a depth of 20: the 21st critical request at once
        // is refused.
        ("SHARED_CAPACITY", "1"),
    ]);
    let prometheus = Prometheus::scraping(server.port, "s3cret");
    // Its first scrape comes seconds after it is ready: a counter must be
    // seen before it grows for its rate to show.
    let deadline = Instant::now() + Duration::from_secs(30);
    while prometheus.query("up == 1")["data"]["result"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the server"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A little of everything, spread over several scrapes so that every
    // counter is seen to grow: admissions, refusals, an adaptive limit that
    // moves, then Redis gone: failures, and the fallback deciding.
    for _ in 0..11 {
        server.get("/api/search", &[("x-user-id", "alice")]);
    }
    for i in 0..20 {
        server.get("/api/user", &[("x-user-id", &format!("u{i}"))]);
    }
    let admin = [("authorization", "Bearer s3cret")];
    let set = server.send("PUT", "/admin/backend", &admin, "error_rate=0.5");
    assert!(set.contains("fails 50% of requests"), "{set}");
    // The adaptive limit looks at its window at most ten times a window:
    // the responses are spread over half of it.
    for i in 0..40 {
        let (user, address) = (format!("r{i}"), format!("198.51.100.{i}"));
        server.get(
            "/api/report",
            &[("x-user-id", &user), ("x-forwarded-for", &address)],
        );
        std::thread::sleep(Duration::from_millis(12));
    }
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..10 {
        server.get("/api/search", &[("x-user-id", "alice")]);
    }
    redis.kill();
    for round in 0..4 {
        for i in 0..10 {
            server.get("/api/user", &[("x-user-id", &format!("v{round}-{i}"))]);
        }
        for _ in 0..4 {
            server.get("/api/search", &[("x-user-id", "bob")]);
        }
        for _ in 0..25 {
            server.get(
                "/api/shared",
                &[
                    ("x-user-id", "pager"),
                    ("x-priority", "critical"),
                    ("x-api-key", "enterprise-demo"),
                ],
            );
        }
        std::thread::sleep(Duration::from_millis(1000));
    }

    // Rates need two scrapes of each series: ask until they come.
    for (title, expr) in &queries {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answer = prometheus.query(expr);
            assert_ne!(
                answer["status"], "error",
                "{title}: {expr} does not parse: {answer}"
            );
            let series = answer["data"]["result"].as_array().map_or(0, Vec::len);
            if series > 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{title}: {expr} returned no series: {answer}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    // The alert rules: each fires on what happened here, and each series
    // carries the labels the rule's annotations read.
    for (name, expr, labels) in &rules {
        let deadline = Instant::now() + Duration::from_secs(20);
        let series = loop {
            let answer = prometheus.query(expr);
            assert_ne!(
                answer["status"], "error",
                "{name}: {expr} does not parse: {answer}"
            );
            let series = answer["data"]["result"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !series.is_empty() {
                break series;
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not fire: {expr}: {answer}; the server printed:\n{}",
                std::iter::from_fn(|| server.printed_line())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        for one in &series {
            for label in labels {
                assert!(
                    one["metric"][label].is_string(),
                    "{name}: no {label} in {one}"
                );
            }
        }
    }
}
