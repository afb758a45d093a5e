//! The limits file: what loading builds (compared with the builders), what
//! it refuses and where, reloading a watched file, and the example server's
//! `LIMITS_FILE` and `--check`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::MatchedPath;
use axum::routing::get;
use axum::Router;
use http::{Method, Request, StatusCode};
use tower::ServiceExt;
use tower_ratelimit::config::{FileDefaults, Limits, LimitsFile, List, ListEntry, Reload, Tier};
use tower_ratelimit::key::{ClientIp, Endpoint, Header, Key, KeyExtractor, PeerAddr, RequestHead};
use tower_ratelimit::layer::{KeyPolicies, PolicyResolver, RoutePolicies};
use tower_ratelimit::policy::PenaltyBox;
use tower_ratelimit::{Algorithm, Limit, Policy};

/// A file with every field.
const EVERY_FIELD: &str = r#"
version = "2026-11-24.1"
algorithm = "gcra"
on_store_failure = "deny"
unmatched = "refuse"

[client_ip]
trusted_proxies = ["10.0.0.0/8", "192.168.1.1"]
header = "x-forwarded-for"
ipv6_prefix = 56

[keys]
user = { header = "x-user-id", or = "ip" }
user-endpoint = { all = ["user", "endpoint"] }
tenant = { header = "x-tenant" }
everyone = { global = true }
api = { api_key = "x-api-key", secret_env = "LIMITS_FILE_TEST_SECRET" }

[tiers]
free = "plan-free = 100/h"
pro = "plan-pro = 1000/h"

[tier_of]
header = "x-plan"
values = { gold = "pro", bronze = "free" }
extension = true
default = "free"

[[routes]]
path = "/api/user"
key = "user"
limits = "user = 100/min"

[[routes]]
method = "POST"
path = "/api/user"
key = "user"
limits = "5/min"
algorithm = "sliding-log"
count_denied = true

[[routes]]
path = "/api/search"
key = "user-endpoint"
limits = "search = 10/min; 1000/day"
shadow = true

[[routes]]
path = "/api/ip"
limits = "ip = 30/min"
penalty = { strikes = 10, within = "1min", ban = "5min", max_ban = "1h" }

[[routes]]
path = "/api/plan"
key = "tenant"
tiered = true

[[routes]]
path = "/api/slow"
key = "user"
limits = "slow-rate = 10/s"
in_flight = { name = "slow", permits = 2, lease = "15s" }

[[routes]]
path = "/api/key"
key = "api"
limits = "keyed = 50/min"

[fallback]
key = "everyone"
limits = "10000/min"

[[overrides]]
key = "user"
value = "acme"
limits = "acme = 5000/min"

[[overrides]]
key = "ip"
value = "198.51.100.7"
limits = "10/min"

[lists]
deny_networks = ["203.0.113.0/24"]
allow_networks = ["192.0.2.0/24"]
deny = [{ key = "user", value = "mallory" }]
allow = [{ key = "tenant", value = "monitoring" }]
"#;

fn request(method: Method, path: &str, headers: &[(&str, &str)], peer: &str) -> Request<()> {
    let mut req = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let mut req = req.body(()).unwrap();
    req.extensions_mut().insert(PeerAddr(
        format!("{peer}:1000").parse::<SocketAddr>().unwrap(),
    ));
    req
}

/// The template axum matched for `path` (routed through a one-route
/// router: `MatchedPath` has no public constructor). Without one, routes
/// are found by the request's path; the endpoint key needs it.
async fn matched(path: &'static str) -> MatchedPath {
    let found = Arc::new(Mutex::new(None));
    let keep = found.clone();
    let router = Router::new().route(
        path,
        axum::routing::any(move |m: MatchedPath| {
            *keep.lock().unwrap() = Some(m);
            async { "" }
        }),
    );
    let req = Request::builder()
        .uri(path)
        .body(axum::body::Body::empty())
        .unwrap();
    router.oneshot(req).await.unwrap();
    let matched = found.lock().unwrap().take().unwrap();
    matched
}

/// Loading the file builds what the builders build: the same policy and
/// key for every kind of request, the same per-key policies, and lists
/// and a failure rule that act the same.
#[tokio::test]
async fn a_file_builds_what_the_builders_build() {
    let search_route = matched("/api/search").await;
    std::env::set_var("LIMITS_FILE_TEST_SECRET", "s3cret");
    let file = LimitsFile::parse(EVERY_FIELD).unwrap();
    assert_eq!(file.version(), "2026-11-24.1");
    let limits = Limits::new(file.clone());

    // By hand.
    let gcra = Algorithm::Gcra;
    let parse = |text: &str| Policy::parse_with(text, gcra).unwrap();
    let ip = ClientIp::new()
        .trust_networks([
            "10.0.0.0/8".parse().unwrap(),
            "192.168.1.1/32".parse().unwrap(),
        ])
        .ipv6_prefix(56);
    let user = Header::new("x-user-id").or(ip.clone());
    let search = (user.clone(), Endpoint);
    let api = tower_ratelimit::key::ApiKey::header("x-api-key", "s3cret");
    let slow = Policy::parse_with("slow-rate = 10/s", gcra)
        .unwrap()
        .to_builder()
        .with(
            Limit::concurrent("slow", 2)
                .unwrap()
                .lease(Duration::from_secs(15))
                .unwrap(),
        )
        .build()
        .unwrap();
    let routes = RoutePolicies::new()
        .route("/api/user", parse("user = 100/min"))
        .route_method(
            Method::POST,
            "/api/user",
            Policy::parse_with("5/min", Algorithm::SlidingLog)
                .unwrap()
                .to_builder()
                .count_denied(true)
                .build()
                .unwrap(),
        )
        .route(
            "/api/search",
            parse("search = 10/min; 1000/day")
                .to_builder()
                .shadow(true)
                .build()
                .unwrap(),
        )
        .route(
            "/api/ip",
            parse("ip = 30/min")
                .to_builder()
                .penalty(
                    PenaltyBox::new(10, Duration::from_secs(60), Duration::from_secs(300))
                        .unwrap()
                        .max_ban(Duration::from_secs(3600))
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .route("/api/slow", slow)
        .route("/api/key", parse("keyed = 50/min"))
        .fallback(parse("10000/min"));
    let plan = |tier: &str| {
        parse(&format!(
            "plan-{tier} = {}/h",
            if tier == "pro" { 1000 } else { 100 }
        ))
        .scoped("/api/plan")
    };

    // Requests of every kind, each with the policy and key the builders give.
    let cases: Vec<(Request<()>, Option<Policy>, Result<Key, _>)> = {
        let r = |m: Method, p: &str, h: &[(&str, &str)]| {
            let mut req = request(m, p, h, "10.1.2.3");
            if p == "/api/search" {
                req.extensions_mut().insert(search_route.clone());
            }
            req
        };
        let via = r;
        let alice = [("x-user-id", "alice")];
        let forwarded = [("x-forwarded-for", "203.0.113.9")];
        let mut cases = Vec::new();
        for (req, policy, key) in [
            (
                r(Method::GET, "/api/user", &alice),
                None,
                user.extract(&RequestHead::from(&r(Method::GET, "/api/user", &alice))),
            ),
            (
                r(Method::HEAD, "/api/user", &alice),
                None,
                Ok(Header::new("x-user-id").key_of(b"alice")),
            ),
            (
                r(Method::POST, "/api/user", &[]),
                None,
                Ok(ip.key_of("10.1.2.3".parse().unwrap())),
            ),
            (
                via(Method::GET, "/api/user", &forwarded),
                None,
                Ok(ip.key_of("203.0.113.9".parse().unwrap())),
            ),
            (
                r(Method::GET, "/api/search", &alice),
                None,
                search.extract(&RequestHead::from(&r(Method::GET, "/api/search", &alice))),
            ),
            (
                r(Method::GET, "/api/ip", &alice),
                None,
                Ok(ip.key_of("10.1.2.3".parse().unwrap())),
            ),
            (
                r(Method::GET, "/api/slow", &alice),
                None,
                Ok(Header::new("x-user-id").key_of(b"alice")),
            ),
            (
                r(Method::GET, "/api/key", &[("x-api-key", "k-1")]),
                None,
                Ok(api.key_of(b"k-1")),
            ),
            (
                r(Method::GET, "/elsewhere", &[]),
                None,
                Ok(Key::new("global", "")),
            ),
        ] {
            let expected = policy.or_else(|| routes.resolve(&RequestHead::from(&req)));
            cases.push((req, expected, key));
        }
        let tenant = Header::new("x-tenant");
        for (headers, tier) in [
            (vec![("x-tenant", "t1"), ("x-plan", "gold")], "pro"),
            (vec![("x-tenant", "t1"), ("x-plan", "bronze")], "free"),
            (vec![("x-tenant", "t1"), ("x-plan", "unknown")], "free"),
            (vec![("x-tenant", "t1")], "free"),
        ] {
            let req = r(Method::GET, "/api/plan", &headers);
            cases.push((req, Some(plan(tier)), Ok(tenant.key_of(b"t1"))));
        }
        // A tier set by an authentication layer wins over the header.
        let mut req = r(
            Method::GET,
            "/api/plan",
            &[("x-tenant", "t1"), ("x-plan", "bronze")],
        );
        req.extensions_mut().insert(Tier::new("pro"));
        cases.push((req, Some(plan("pro")), Ok(tenant.key_of(b"t1"))));
        cases
    };
    let (keys, policies) = (limits.keys(), limits.policies());
    for (req, policy, key) in &cases {
        let head = RequestHead::from(req);
        let what = format!("{} {}", req.method(), req.uri());
        assert_eq!(policies.resolve(&head).as_ref(), policy.as_ref(), "{what}");
        assert_eq!(keys.extract(&head).ok(), key.clone().ok(), "{what}");
    }
    assert!(policies
        .resolve(&RequestHead::from(&request(
            Method::GET,
            "/api/search",
            &[],
            "10.0.0.1"
        )))
        .unwrap()
        .is_shadow());

    // Per-key policies, exactly as KeyPolicies built by hand.
    let overrides = KeyPolicies::new()
        .set(
            Header::new("x-user-id").key_of(b"acme"),
            parse("acme = 5000/min"),
        )
        .set(ip.key_of("198.51.100.7".parse().unwrap()), parse("10/min"));
    let from_file = limits.overrides().current();
    assert_eq!(from_file.len(), overrides.len());
    for key in [
        Header::new("x-user-id").key_of(b"acme"),
        ip.key_of("198.51.100.7".parse().unwrap()),
    ] {
        assert_eq!(from_file.get(&key), overrides.get(&key));
    }
}

/// What the file's lists, failure rule and unmatched rule do, through its
/// layer on an axum app.
#[tokio::test]
async fn the_file_layer_lists_and_refuses_as_the_file_says() {
    std::env::set_var("LIMITS_FILE_TEST_SECRET", "s3cret");
    let limits = Limits::new(LimitsFile::parse(EVERY_FIELD).unwrap());
    let app = Router::new()
        .route("/api/user", get(|| async { "ok" }))
        .route("/api/plan", get(|| async { "ok" }))
        .layer(limits.layer());
    let send = |headers: &[(&str, &str)], peer: &str, path: &str| {
        let mut req = Request::get(path);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let mut req = req.body(axum::body::Body::empty()).unwrap();
        req.extensions_mut()
            .insert(PeerAddr(format!("{peer}:1").parse().unwrap()));
        app.clone().oneshot(req)
    };
    let status = |r: Result<axum::response::Response, _>| r.unwrap().status();
    assert_eq!(
        status(send(&[("x-user-id", "bob")], "198.51.100.1", "/api/user").await),
        StatusCode::OK
    );
    // Denied by network (the peer; no trusted proxy in between) and by key.
    assert_eq!(
        status(send(&[], "203.0.113.5", "/api/user").await),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status(send(&[("x-user-id", "mallory")], "198.51.100.1", "/api/user").await),
        StatusCode::FORBIDDEN
    );
    // Allowed: unlimited, without quota headers.
    let allowed = send(&[("x-tenant", "monitoring")], "198.51.100.1", "/api/plan")
        .await
        .unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
    assert!(allowed.headers().get("ratelimit-policy").is_none());
    let planned = send(&[("x-tenant", "t2")], "198.51.100.1", "/api/plan")
        .await
        .unwrap();
    assert_eq!(
        planned.headers()["ratelimit-policy"],
        r#""plan-free";q=100;w=3600"#
    );
}

/// Each mistake is refused with the line and column it is at and what was
/// expected there; unknown keys are mistakes, not ignored.
#[test]
fn mistakes_are_refused_with_their_line_and_column() {
    let cases: &[(&str, (usize, usize), &str)] = &[
        ("[[routes]]\npath = \"/a\"\nlimts = \"10/min\"\n", (3, 1), "unknown field `limts`"),
        ("[[routes]]\npath = \"/a\"\nlimits = \"10/fortnight\"\n", (3, 10), "unknown time unit \"fortnight\""),
        ("[[routes]]\npath = \"/a\"\nlimits = \"0/min\"\n", (3, 10), "at least 1"),
        ("algorithm = \"fastest\"\n", (1, 13), "fastest"),
        ("[[routes]]\npath = \"/a\"\nkey = \"usr\"\nlimits = \"1/s\"\n", (3, 7), "no key named \"usr\""),
        ("[[routes]]\npath = \"/a\"\nmethod = \"G T\"\nlimits = \"1/s\"\n", (3, 10), "not an HTTP method"),
        ("[lists]\ndeny_networks = [\"10.0.0.0/33\"]\n", (2, 18), "not a network"),
        ("[keys]\na = { all = [\"b\", \"ip\"] }\nb = { header = \"x-b\", or = \"a\" }\n", (2, 5), "defined by itself"),
        ("[keys]\na = { header = \"x-a\", client_ip = true }\n", (2, 5), "exactly one of"),
        ("[keys]\na = { api_key = \"x-k\", secret_env = \"LIMITS_FILE_TEST_UNSET\" }\n", (2, 5), "LIMITS_FILE_TEST_UNSET"),
        ("[keys]\nip = { header = \"x-ip\" }\n", (2, 6), "built-in"),
        ("[[routes]]\npath = \"/a\"\n", (1, 1), "needs limits"),
        ("[[routes]]\npath = \"/a\"\nlimits = \"1/s\"\n[[routes]]\npath = \"/a\"\nlimits = \"2/s\"\n", (4, 1), "has a route already"),
        ("[[routes]]\npath = \"/a\"\ntiered = true\n", (0, 0), "no [tier_of]"),
        ("[tiers]\nfree = \"1/s\"\n[tier_of]\nheader = \"x-plan\"\ndefault = \"gold\"\n", (3, 1), "\"gold\""),
        ("[[routes]]\npath = \"/a\"\nlimits = \"1/s\"\npenalty = { strikes = 3, within = \"1 fortnight\", ban = \"1min\" }\n", (4, 11), "not a length of time"),
        ("[[overrides]]\nkey = \"ip\"\nvalue = \"alice\"\nlimits = \"1/s\"\n", (1, 1), "not an IP address"),
        ("on_store_failure = \"maybe\"\n", (1, 20), "expected \"allow\" or \"deny\""),
        ("[[routes]\n", (1, 10), "expected `]`"),
    ];
    for (text, (line, column), says) in cases {
        let err = LimitsFile::parse(text).expect_err(text);
        if *line == 0 {
            assert_eq!(err.line(), None, "{text}: {err}");
        } else {
            assert_eq!(
                (err.line(), err.column()),
                (Some(*line), Some(*column)),
                "{text}: {err}"
            );
        }
        assert!(err.message().contains(says), "{text}: {err}");
    }
    // Read from a file, the error names it.
    let dir = std::env::temp_dir().join(format!("limits-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[[routes]]\npath = \"/a\"\nlimits = \"1/fortnight\"\n",
    )
    .unwrap();
    let err = LimitsFile::read(&path).unwrap_err();
    assert_eq!(err.file(), Some(path.as_path()));
    assert!(
        err.to_string()
            .starts_with(&format!("{}: line 3, column 10: ", path.display())),
        "{err}"
    );
    let err = LimitsFile::read(dir.join("missing.toml")).unwrap_err();
    assert!(err.to_string().contains("cannot read it"), "{err}");
}

/// Changes made to a file in code (what the admin API and a fleet make)
/// are checked like any file, and keep what they do not touch.
#[test]
fn changes_to_a_file_are_checked_and_keep_the_rest() {
    let file = FileDefaults::new()
        .algorithm(Algorithm::Gcra)
        .parse("[[routes]]\npath = \"/a\"\nlimits = \"a = 10/min\"\npenalty = { strikes = 3, within = \"1min\", ban = \"1min\" }\n")
        .unwrap();
    let head_of = |path: &str| request(Method::GET, path, &[], "10.0.0.1");
    let req = head_of("/a");
    let head = RequestHead::from(&req);
    let changed = file.with_route_limits(None, "/a", "a = 20/min").unwrap();
    let policy = changed.policy(&Method::GET, "/a", &head).unwrap();
    assert_eq!(policy.limits()[0].quota().limit(), 20);
    assert_eq!(
        policy.limits()[0].algorithm(),
        Algorithm::Gcra,
        "the defaults stay"
    );
    assert!(policy.penalty().is_some(), "the penalty box stays");
    assert_ne!(changed.version(), file.version());
    let err = file
        .with_route_limits(None, "/a", "a = 20/fortnight")
        .unwrap_err();
    assert!(err.message().contains("fortnight"), "{err}");
    assert!(file.with_route_limits(None, "/b", "1/s").is_err());
    let listed = file
        .with_listed(
            List::Deny,
            &ListEntry::Network("203.0.113.0/24".parse().unwrap()),
            true,
        )
        .unwrap()
        .with_override("ip", "198.51.100.1", Some("1/s"))
        .unwrap();
    assert!(
        listed.text().contains("203.0.113.0/24"),
        "{}",
        listed.text()
    );
    let unlisted = listed
        .with_listed(
            List::Deny,
            &ListEntry::Network("203.0.113.0/24".parse().unwrap()),
            false,
        )
        .unwrap()
        .with_override("ip", "198.51.100.1", None)
        .unwrap();
    assert!(
        !unlisted.text().contains("203.0.113"),
        "{}",
        unlisted.text()
    );
}

/// A watched file: a valid new version runs within 2 s; an invalid one is
/// refused, said, and the running version stays.
#[tokio::test]
async fn a_watched_file_reloads_and_refuses_bad_versions() {
    let dir = std::env::temp_dir().join(format!("limits-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    let write = |limits: &str| {
        std::fs::write(
            &path,
            format!("[[routes]]\npath = \"/a\"\nlimits = \"{limits}\"\n"),
        )
        .unwrap();
    };
    write("a = 10/min");
    let limits = Limits::new(LimitsFile::read(&path).unwrap());
    let heard = Arc::new(Mutex::new(Vec::new()));
    let tell = heard.clone();
    let watcher = limits.watch(&path, move |reload| {
        let said = match reload {
            Reload::Applied(file) => format!("applied {}", file.version()),
            Reload::Refused(error) => format!("refused {error}"),
            _ => unreachable!(),
        };
        tell.lock().unwrap().push(said);
    });
    let req = request(Method::GET, "/a", &[], "10.0.0.1");
    let limit_now = || {
        let policy = limits.policies().resolve(&RequestHead::from(&req)).unwrap();
        policy.limits()[0].quota().limit()
    };
    assert_eq!(limit_now(), 10);
    write("a = 20/min");
    let took = until(|| limit_now() == 20).await;
    assert!(took < Duration::from_secs(2), "took {took:?}");
    write("a = 20/fortnight");
    until(&|| {
        heard
            .lock()
            .unwrap()
            .iter()
            .any(|h| h.starts_with("refused"))
    })
    .await;
    let said = heard.lock().unwrap().clone();
    assert!(said[0].starts_with("applied sha256:"), "{said:?}");
    assert!(
        said[1].contains("line 3, column 10") && said[1].contains("fortnight"),
        "{said:?}"
    );
    assert_eq!(limit_now(), 20, "the running version stays");
    write("a = 30/min");
    until(|| limit_now() == 30).await;
    assert_eq!(limit_now(), 30);
    watcher.abort();
}

/// Waits (at most 5 s) until `done`; how long that took.
async fn until(done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

/// `cargo run --example server -- --check FILE`: `ok`, or the error with
/// its line and column, and the exit code.
#[test]
fn the_example_server_checks_a_file() {
    let check = |path: &std::path::Path| {
        let out = std::process::Command::new(crate::support::example::binary())
            .arg("--check")
            .arg(path)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/limits.toml");
    assert_eq!(check(&shipped), (Some(0), "ok\n".to_owned()));
    let dir = std::env::temp_dir().join(format!("limits-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    let text = std::fs::read_to_string(&shipped)
        .unwrap()
        .replace("search = 10/min", "search = 10/mni");
    std::fs::write(&bad, text).unwrap();
    let (code, said) = check(&bad);
    assert_eq!(code, Some(1));
    assert!(
        said.contains("bad.toml: line ") && said.contains("unknown time unit \"mni\""),
        "{said}"
    );
    // A valid file that leaves one of the server's routes unlimited.
    let partial = dir.join("partial.toml");
    std::fs::write(
        &partial,
        "[[routes]]\npath = \"/api/user\"\nlimits = \"1/s\"\n",
    )
    .unwrap();
    let (code, said) = check(&partial);
    assert_eq!(code, Some(1));
    assert!(
        said.contains("the application needs limits for GET /api/ip"),
        "{said}"
    );
}

/// Where a test's limits file goes (`limits.toml` in a folder of its own,
/// named after `name`), and the example's shipped file's text.
fn shipped_file_in(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/limits.toml"))
            .unwrap();
    (dir.join("limits.toml"), shipped)
}

/// `LIMITS_FILE=…`: the example server's routes limited by the file, an
/// edit live within 2 s (its version printed), a broken edit refused with
/// its line and column while the running version stays.
#[test]
fn the_example_server_runs_and_watches_its_limits_file() {
    let (path, shipped) = shipped_file_in("limits-served");
    let with_search =
        |quota: &str| shipped.replace("search = 10/min", &format!("search = {quota}"));
    std::fs::write(&path, with_search("3/min")).unwrap();
    let mut server =
        crate::support::example::ExampleServer::start(&[("LIMITS_FILE", path.to_str().unwrap())]);
    let policy_of = |response: &str| {
        response
            .lines()
            .find_map(|l| l.strip_prefix("ratelimit-policy: "))
            .map(str::to_owned)
    };
    let ann = [("x-user-id", "ann")];
    let response = server.get("/api/search", &ann);
    assert_eq!(
        policy_of(&response).as_deref(),
        Some(r#""search";q=3;w=60"#),
        "{response}"
    );

    let edited = Instant::now();
    std::fs::write(&path, with_search("5/min")).unwrap();
    // The reload's line (the start-up's names the file instead).
    std::iter::from_fn(|| server.next_line())
        .find(|line| line.starts_with("limits: version ") && line.ends_with(" live"))
        .expect("no reload line");
    assert!(
        edited.elapsed() < Duration::from_secs(2),
        "{:?}",
        edited.elapsed()
    );
    let response = server.get("/api/search", &ann);
    assert_eq!(
        policy_of(&response).as_deref(),
        Some(r#""search";q=5;w=60"#),
        "the same budget, read under 5/min"
    );
    assert!(
        response.contains("ratelimit: \"search\";r=3;"),
        "{response}"
    );

    std::fs::write(&path, with_search("5/mni")).unwrap();
    let refused = server
        .line_starting("limits: refused")
        .expect("no refusal line");
    assert!(
        refused.contains("line ") && refused.contains("column ") && refused.contains("\"mni\""),
        "{refused}"
    );
    let response = server.get("/api/search", &ann);
    assert_eq!(
        policy_of(&response).as_deref(),
        Some(r#""search";q=5;w=60"#)
    );
}

/// A chain of `count` keys, each naming the next by `or` (or in an `all`
/// with `ip`), then a route keyed by the first.
fn chained_keys(count: usize, by_all: bool) -> String {
    let mut text = String::from("[keys]\n");
    for i in 0..count {
        if by_all {
            text.push_str(&format!("k{i} = {{ all = [\"ip\", \"k{}\"] }}\n", i + 1));
        } else {
            text.push_str(&format!(
                "k{i} = {{ header = \"x-{i}\", or = \"k{}\" }}\n",
                i + 1
            ));
        }
    }
    text.push_str(&format!("k{count} = {{ header = \"x-last\" }}\n"));
    text + "[[routes]]\npath = \"/a\"\nkey = \"k0\"\nlimits = \"10/s\"\n"
}

/// Keys naming keys thousands deep are refused with a line and column,
/// on a thread whose stack is a quarter of a tokio worker's: the compiler
/// recurses at most 32 deep, however the file nests them.
#[test]
fn keys_nested_past_32_deep_are_refused_not_a_stack_overflow() {
    let parse_on_a_small_stack = |text: String| {
        std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || LimitsFile::parse(&text).map(|_| ()))
            .unwrap()
            .join()
            .expect("the parser overflowed its stack")
    };
    for (count, by_all) in [
        (3_000, false),
        (20_000, false),
        (3_000, true),
        (20_000, true),
    ] {
        let error = parse_on_a_small_stack(chained_keys(count, by_all)).unwrap_err();
        assert!(error.message().contains("more than 32 deep"), "{error}");
        assert!(
            error.line().is_some() && error.column().is_some(),
            "{error}"
        );
    }
    // 31 keys below the first: as deep as keys may go.
    parse_on_a_small_stack(chained_keys(31, false)).unwrap();
    // Two parts a level, 20 levels: a million extractions a request.
    let mut wide = String::from("[keys]\nk20 = { header = \"x\" }\n");
    for i in 0..20 {
        wide.push_str(&format!("k{i} = {{ all = [\"k{0}\", \"k{0}\"] }}\n", i + 1));
    }
    wide.push_str("[[routes]]\npath = \"/a\"\nkey = \"k0\"\nlimits = \"10/s\"\n");
    let error = LimitsFile::parse(&wide).unwrap_err();
    assert!(error.message().contains("at most 64"), "{error}");
    // A cycle: its place.
    let error = LimitsFile::parse(
        "[keys]\na = { header = \"x\", or = \"b\" }\nb = { header = \"y\", or = \"a\" }\n[[routes]]\npath = \"/a\"\nkey = \"a\"\nlimits = \"1/s\"\n",
    )
    .unwrap_err();
    assert!(error.message().contains("defined by itself"), "{error}");
    assert!(error.line().is_some(), "{error}");
}

/// `--check` of a file whose keys nest 10,000 deep: refused with its
/// place, exit code 1, no abort.
#[test]
fn the_example_server_checks_deeply_nested_keys() {
    let dir = std::env::temp_dir().join(format!("limits-deep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("deep.toml");
    std::fs::write(&path, chained_keys(10_000, false)).unwrap();
    let out = std::process::Command::new(crate::support::example::binary())
        .arg("--check")
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("line ") && said.contains("more than 32 deep"),
        "{said}"
    );
}

/// A watcher that hears what happens to `path`, on `limits`.
fn heard_watching(limits: &Limits, path: &std::path::Path) -> Arc<Mutex<Vec<String>>> {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let tell = heard.clone();
    let watcher = limits.watch(path, move |reload| {
        let said = match reload {
            Reload::Applied(file) => format!("applied {}", file.text()),
            Reload::Refused(error) => format!("refused {error}"),
            _ => unreachable!(),
        };
        tell.lock().unwrap().push(said);
    });
    drop(watcher);
    heard
}

fn route_a(limits: &str) -> String {
    format!("[[routes]]\npath = \"/a\"\nlimits = \"{limits}\"\n")
}

/// What is not a limits file is refused without being read, and a valid
/// file in its place later runs: `/dev/zero` behind a symlink, a FIFO
/// (opening one would wait for a writer for ever), a 2 MiB file.
#[tokio::test]
async fn a_watched_path_that_is_no_limits_file_is_refused_unread() {
    let dir = std::env::temp_dir().join(format!("limits-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    std::fs::write(&path, route_a("a = 10/min")).unwrap();
    let limits = Limits::new(LimitsFile::read(&path).unwrap());
    let heard = heard_watching(&limits, &path);
    let refused = |what: &str| {
        let heard = heard.clone();
        let what = what.to_owned();
        async move {
            until(|| heard.lock().unwrap().iter().any(|h| h.contains(&what))).await;
            let said = heard.lock().unwrap().clone();
            assert!(said.iter().any(|h| h.contains(&what)), "{what}: {said:?}");
        }
    };

    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    refused("not a regular file").await;
    assert!(LimitsFile::read(&path)
        .unwrap_err()
        .message()
        .contains("not a regular file"));

    std::fs::remove_file(&path).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&path).status();
    if made.is_ok_and(|s| s.success()) {
        // Read, it would wait for a writer for ever: refused at once.
        assert!(LimitsFile::read(&path)
            .unwrap_err()
            .message()
            .contains("not a regular file"));
        // Refused by the watcher as well (the same words as the symlink's,
        // so not said again): it goes on, as the end of this test shows.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        std::fs::remove_file(&path).unwrap();
    }

    let huge = format!("{}{}", route_a("a = 10/min"), "#".repeat(2 << 20));
    std::fs::write(&path, huge).unwrap();
    refused("at most 1048576").await;
    assert!(LimitsFile::read(&path)
        .unwrap_err()
        .message()
        .contains("at most 1048576"));

    std::fs::write(&path, route_a("a = 30/min")).unwrap();
    let req = request(Method::GET, "/a", &[], "10.0.0.1");
    let limit_now = || {
        let policy = limits.policies().resolve(&RequestHead::from(&req)).unwrap();
        policy.limits()[0].quota().limit()
    };
    until(|| limit_now() == 30).await;
    assert_eq!(limit_now(), 30, "a valid file after them runs");
}

/// Every version is checked as the first was: an empty file, or one without
/// a route the application requires, is refused and the running one stays;
/// a file written in two parts is read once whole, never half.
#[tokio::test]
async fn reloads_are_checked_like_start_up_and_never_read_half_written() {
    let dir = std::env::temp_dir().join(format!("limits-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    let both = |a: &str| {
        format!(
            "{}[[routes]]\npath = \"/login\"\nmethod = \"POST\"\nlimits = \"5/min\"\n",
            route_a(a)
        )
    };
    std::fs::write(&path, both("a = 10/min")).unwrap();
    let defaults = FileDefaults::new().require_route(Some(Method::POST), "/login");
    let limits = Limits::new(defaults.read(&path).unwrap());
    let heard = heard_watching(&limits, &path);
    let said_after = |n: usize| {
        let heard = heard.clone();
        async move {
            until(|| heard.lock().unwrap().len() > n).await;
            heard.lock().unwrap().get(n).cloned().unwrap_or_default()
        }
    };

    std::fs::write(&path, "").unwrap();
    let said = said_after(0).await;
    assert!(
        said.contains("refused") && said.contains("limits nothing"),
        "{said}"
    );
    // Cut short before the login route.
    std::fs::write(&path, route_a("a = 10/min")).unwrap();
    let said = said_after(1).await;
    assert!(said.contains("needs limits for POST /login"), "{said}");
    let file = limits.current();
    assert!(file.text().contains("/login"), "the running version stays");

    // Written in two parts, 100 ms apart (a look every 500 ms): the first
    // part alone is a valid file, but never runs.
    let whole = both("a = 40/min");
    let (first, rest) = whole.split_at(route_a("a = 40/min").len());
    let first_part = format!("{first}\n");
    std::fs::write(&path, &first_part).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::write(&path, format!("{first_part}{rest}")).unwrap();
    let said = said_after(2).await;
    assert!(
        said.starts_with("applied") && said.contains("/login"),
        "{said}"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        heard.lock().unwrap().len(),
        3,
        "{:?}",
        heard.lock().unwrap()
    );
}

/// The example server watching `LIMITS_FILE`: an emptied file, and one cut
/// short before `/api/login`, are refused (said, with why) and every route
/// keeps its limits; nothing answers 500.
#[test]
fn the_example_server_refuses_an_emptied_or_cut_limits_file() {
    let (path, shipped) = shipped_file_in("limits-cut");
    std::fs::write(&path, &shipped).unwrap();
    let mut server =
        crate::support::example::ExampleServer::start(&[("LIMITS_FILE", path.to_str().unwrap())]);
    let login = |server: &crate::support::example::ExampleServer| {
        server.send(
            "POST",
            "/api/login",
            &[("content-type", "application/x-www-form-urlencoded")],
            "user=ann&password=demo",
        )
    };
    let response = login(&server);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    std::fs::write(&path, "").unwrap();
    let refused = server.line_starting("limits: refused").expect("no refusal");
    assert!(refused.contains("limits nothing"), "{refused}");
    let cut = &shipped[..shipped.find("/api/login").unwrap()];
    let cut = &cut[..cut.rfind("[[routes]]").unwrap()];
    std::fs::write(&path, cut).unwrap();
    let refused = server.line_starting("limits: refused").expect("no refusal");
    assert!(
        refused.contains("needs limits for POST /api/login"),
        "{refused}"
    );

    let response = server.get("/api/search", &[("x-user-id", "ann")]);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains("ratelimit-policy: \"search\""),
        "{response}"
    );
    let response = login(&server);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}
