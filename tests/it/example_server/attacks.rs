//! The example server's binary attacked over loopback as a hostile client
//! would: file descriptors exhausted by idle connections, megabytes of
//! unfinished headers, API keys guessed through `/api/quota`, a Redis that
//! never answers at start-up.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::example::{ExampleServer, KeptAlive};
#[cfg(feature = "redis")]
use crate::support::RedisServer;

/// Connections to `server` that send nothing.
fn idle_connections(server: &ExampleServer, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", server.port)).ok())
        .collect()
}

/// `/health` answers 200 within `within`.
fn answers_within(server: &ExampleServer, within: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if server.get("/health", &[]).starts_with("HTTP/1.1 200") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// With a cap above what `ulimit -n` allows, accepting fails with EMFILE:
/// the server waits that out and serves again once connections close.
#[test]
fn running_out_of_file_descriptors_does_not_end_the_server() {
    let mut server = ExampleServer::start_limited(
        &[
            ("MAX_CONNECTIONS", "5000"),
            ("MAX_CONNECTIONS_PER_CLIENT", "5000"),
        ],
        Some(256),
    );
    let idle = idle_connections(&server, 288);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        server.is_running(),
        "the server exited with {} idle connections",
        idle.len()
    );
    drop(idle);
    assert!(
        answers_within(&server, Duration::from_secs(5)),
        "the server did not serve again once the idle connections closed"
    );
}

/// Past the cap in all, each new connection takes the place of the one
/// idle longest: 260 silent connections under a cap of 192 (and `ulimit -n`
/// 256) close the first 68, keep the last 192, and the server never runs
/// out of descriptors; a client that sends a request is served beside them.
#[test]
fn connections_past_the_cap_take_the_place_of_the_idle_longest() {
    // Every connection from one address: the cap in all is what is tested.
    let mut server = ExampleServer::start_limited(
        &[
            ("REQUEST_TIMEOUT_MS", "60000"),
            ("MAX_CONNECTIONS", "192"),
            ("MAX_CONNECTIONS_PER_CLIENT", "192"),
        ],
        Some(256),
    );
    let idle = idle_connections(&server, 260);
    assert_eq!(idle.len(), 260);
    std::thread::sleep(Duration::from_millis(500));
    let closed: Vec<bool> = idle
        .iter()
        .map(|mut stream| {
            stream.set_nonblocking(true).unwrap();
            match stream.read(&mut [0; 1]) {
                Ok(n) => n == 0,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            }
        })
        .collect();
    let first = closed[..68].iter().filter(|c| **c).count();
    let last = closed[68..].iter().filter(|c| **c).count();
    assert_eq!(
        (first, last),
        (68, 0),
        "closed of the first 68, of the last 192"
    );
    assert!(server.is_running());
    assert!(answers_within(&server, Duration::from_secs(5)));
}

/// One client kept every connection the server allows (200) by sending a
/// request on each now and then, and every other client's connections were
/// closed at once. Now one address holds at most its share (25 of 200 by
/// default): each connection past it closes that address's oldest idle one,
/// and other addresses connect and are served.
#[test]
fn one_client_cannot_hold_every_connection() {
    let server =
        ExampleServer::start(&[("MAX_CONNECTIONS", "200"), ("REQUEST_TIMEOUT_MS", "60000")]);
    let health = "GET /health HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut held: Vec<KeptAlive> = (0..200)
        .map(|_| {
            let mut connection = KeptAlive::from(1, server.port);
            assert_eq!(connection.status(health), 200);
            connection
        })
        .collect();
    // Others: each connects and is served.
    let served = (2..=97u8)
        .filter(|&client| KeptAlive::from(client, server.port).try_status(health) == Some(200))
        .count();
    assert_eq!(served, 96, "{served} of 96 other clients were served");
    // The attacker keeps its newest 25, its oldest were closed.
    let open: Vec<usize> = held
        .iter_mut()
        .enumerate()
        .filter_map(|(i, c)| (c.try_status(health) == Some(200)).then_some(i))
        .collect();
    assert_eq!(
        open,
        (175..200).collect::<Vec<_>>(),
        "the attacker's open connections"
    );
}

/// A whole header block over 64 KiB that arrives in one write is refused
/// too (431), as one that trickles in is: the bound is exact.
#[test]
fn a_header_block_over_64_kib_is_refused_however_it_arrives() {
    let server = ExampleServer::start(&[]);
    let block = |bytes: usize| -> String {
        let start = "GET /health HTTP/1.1\r\nhost: x\r\n";
        let padding = bytes - start.len() - "x-pad: \r\n\r\n".len();
        format!("{start}x-pad: {}\r\n\r\n", "a".repeat(padding))
    };
    let status = |request: String| {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        String::from_utf8_lossy(&response)
            .get(9..12)
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(status(block(64 * 1024)), "200", "exactly 64 KiB");
    for bytes in [64 * 1024 + 1, 80 * 1024, 111 * 1024] {
        assert_eq!(status(block(bytes)), "431", "{bytes} bytes in one write");
    }
}

/// Header bytes are bounded per connection: past 64 KiB the server answers
/// 431 and closes, so 300 connections each sending 390 KB of an
/// unfinished header block cannot grow its memory by more than a few MiB.
#[test]
fn unfinished_headers_are_cut_off_at_64_kib() {
    let server = ExampleServer::start(&[]);
    let send_headers = |bytes: usize| -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n");
        let line = format!("x-pad: {}\r\n", "a".repeat(1000));
        let mut sent = 0;
        while sent < bytes && stream.write_all(line.as_bytes()).is_ok() {
            sent += line.len();
        }
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        String::from_utf8_lossy(&response).into_owned()
    };
    assert!(
        send_headers(100_000).starts_with("HTTP/1.1 431"),
        "100 KB of headers were not answered with 431"
    );
    let before = server.rss_kib();
    let connections: Vec<_> = (0..300)
        .map(|_| {
            let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            let _ = stream.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n");
            let line = format!("x-pad: {}\r\n", "a".repeat(1000));
            stream.set_nonblocking(true).unwrap();
            let mut sent = 0;
            while sent < 390_000 {
                match stream.write(line.as_bytes()) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let grown = server.rss_kib().saturating_sub(before);
    drop(connections);
    eprintln!("300 connections of 390 KB of headers: RSS grew {grown} KiB");
    // Unbounded, 300 × 390 KB would be 114 MiB and more.
    assert!(grown < 40 * 1024, "RSS grew by {grown} KiB");
}

/// `/api/quota` evaluates the `x-api-key` it is sent: an unknown key is a
/// 401 there too, counted against the same 10 failed checks a minute per
/// client IP as `/api/key`, past which every request is refused, a right
/// key included — it is no faster oracle than `/api/key`.
#[test]
fn api_keys_cannot_be_guessed_through_the_quota_route() {
    let server = ExampleServer::start(&[]);
    let status = |path: &str, key: &str, user: &str| -> u16 {
        let response = server.get(path, &[("x-api-key", key), ("x-user-id", user)]);
        response
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    // A right key: its tier's limits.
    let known = server.get("/api/quota", &[("x-api-key", "pro-demo")]);
    assert!(known.contains("\"limit\":1000"), "{known}");
    // Guesses, each from a new user id so that /api/quota's own limit
    // never decides: 10 are answered 401, then everything is refused.
    let guesses: Vec<u16> = (0..30)
        .map(|i| status("/api/quota", &format!("guess-{i}"), &format!("u{i}")))
        .collect();
    assert_eq!(guesses[..10], [401; 10], "{guesses:?}");
    assert!(guesses[10..].iter().all(|s| *s == 429), "{guesses:?}");
    // The failures are the same budget as /api/key's: it is spent there too.
    assert_eq!(status("/api/key", "pro-demo", "u-last"), 429);
    assert_eq!(status("/api/quota", "pro-demo", "u-last2"), 429);
}

/// With Redis frozen (it accepts, never answers), the server listens at
/// once, limits by its failure rule, answers a change of the limits 503
/// fast, and joins the fleet as soon as Redis answers.
#[cfg(feature = "redis")]
#[test]
fn a_frozen_redis_neither_delays_start_up_nor_hangs_admin_changes() {
    let redis = RedisServer::start();
    redis.pause();
    let started = Instant::now();
    let mut server = ExampleServer::start(&[("REDIS_URL", &redis.url()), ("ADMIN_TOKEN", "t")]);
    let listening = started.elapsed();
    eprintln!("Redis frozen: listening after {listening:?}");
    assert!(
        listening < Duration::from_secs(1),
        "listening after {listening:?}"
    );
    assert!(server.get("/api/user", &[]).starts_with("HTTP/1.1 200"));
    let put = |server: &ExampleServer| {
        let started = Instant::now();
        let response = server.send(
            "PUT",
            "/admin/limits/api/search",
            &[("authorization", "Bearer t")],
            "20/min",
        );
        (response, started.elapsed())
    };
    let (response, took) = put(&server);
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    eprintln!("Redis frozen: a limits change answered 503 after {took:?}");
    assert!(took < Duration::from_secs(1), "503 after {took:?}");
    // A reset before the fleet is joined does nothing, and says so: this
    // server goes on refusing the client it decided on alone.
    let ada = [("x-user-id", "ada")];
    let search: Vec<String> = (0..11).map(|_| server.get("/api/search", &ada)).collect();
    assert!(search[10].starts_with("HTTP/1.1 429"), "{}", search[10]);
    let reset = server.send(
        "DELETE",
        "/admin/keys?user=ada",
        &[("authorization", "Bearer t")],
        "",
    );
    assert!(reset.starts_with("HTTP/1.1 503"), "{reset}");
    assert!(reset.contains("nothing was reset"), "{reset}");
    assert!(server.get("/api/search", &ada).starts_with("HTTP/1.1 429"));
    redis.resume();
    assert!(
        server.line_starting("limits: joined the fleet").is_some(),
        "the fleet was not joined once Redis answered"
    );
    let (response, _) = put(&server);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// The header `name` of `response`, if it has it.
fn header<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    response.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// With a small key cap (`MAX_KEYS`), 30,000 made-up user ids on
/// `/api/burst` (each state living an hour, longer than the ban) evict one
/// another, never a client's ban on `/api/ip` or its login lockout.
#[test]
fn made_up_ids_evict_neither_a_ban_nor_a_lockout() {
    // The flood at full speed: what is tested is the key cap alone.
    let mut server = ExampleServer::start(&[("MAX_KEYS", "2000"), ("IDS_PER_IP", "1000000")]);
    assert!(server
        .line_starting("limits in memory: at most 2000 keys")
        .is_some());
    let ip = |n: usize| {
        (0..n)
            .map(|_| "GET /api/ip HTTP/1.1\r\nhost: x\r\n\r\n".to_owned())
            .collect::<Vec<_>>()
    };
    // 30 a minute, then 10 denials: banned for 5 minutes.
    let statuses = server.statuses_kept_alive(ip(41));
    assert_eq!(statuses[30..], [429; 11][..], "{statuses:?}");
    let banned = server.get("/api/ip", &[]);
    let retry: u64 = header(&banned, "retry-after").unwrap().parse().unwrap();
    assert!(retry > 250, "{banned}");
    let login = |password: &str| {
        let body = format!("user=ann&password={password}");
        format!("POST /api/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n{body}", body.len())
    };
    let statuses = server.statuses_kept_alive((0..6).map(|_| login("wrong")));
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);

    let flood = (0..30_000)
        .map(|i| format!("GET /api/burst HTTP/1.1\r\nhost: x\r\nx-user-id: made-up-{i}\r\n\r\n"));
    let statuses = server.statuses_kept_alive(flood);
    assert!(statuses.iter().all(|s| *s == 200));

    let still = server.get("/api/ip", &[]);
    assert!(
        still.starts_with("HTTP/1.1 429"),
        "the ban was evicted: {still}"
    );
    let statuses = server.statuses_kept_alive([login("demo")]);
    assert_eq!(statuses, [429], "the lockout was evicted");
}

/// `/admin/top` lists a denied client IP with no part of its address, and
/// a hash keyed per process: another server shows another hash (nothing to
/// test guesses against offline), unless both share `REDACTION_SECRET`.
#[test]
fn redacted_addresses_show_nothing_to_guess_from() {
    let top = |env: &[(&str, &str)]| {
        let server = ExampleServer::start(env);
        for _ in 0..31 {
            server.get("/api/ip", &[]);
        }
        let top = server.get("/admin/top", &[]);
        let key = top
            .split("\"key\":\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("no key in {top}"))
            .to_owned();
        key
    };
    let (one, two) = (top(&[]), top(&[]));
    assert!(one.starts_with("ip:…#") && !one.contains("127"), "{one}");
    assert_ne!(
        one, two,
        "the same hash in two processes without a shared secret"
    );
    let secret = [("REDACTION_SECRET", "fleet secret")];
    assert_eq!(top(&secret), top(&secret));
}

/// Two servers on one Redis: a client banned on `/api/ip` is refused by
/// both, the second from its denial cache; `DELETE /admin/keys?ip=` on the
/// first lifts the ban on both within a second (the fleet tells the second
/// to forget what it remembers).
#[cfg(feature = "redis")]
#[test]
fn a_reset_on_one_server_reaches_every_server_within_a_second() {
    let redis = RedisServer::start();
    let env = [("REDIS_URL", redis.url()), ("ADMIN_TOKEN", "t".to_owned())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut servers = [ExampleServer::start(&env), ExampleServer::start(&env)];
    for server in &mut servers {
        assert!(server.line_starting("limits: joined the fleet").is_some());
    }
    let ip = || "GET /api/ip HTTP/1.1\r\nhost: x\r\n\r\n".to_owned();
    let statuses = servers[0].statuses_kept_alive((0..41).map(|_| ip()));
    assert_eq!(statuses[40], 429, "{statuses:?}");
    let refused = servers[1].get("/api/ip", &[]);
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert_eq!(servers[1].statuses_kept_alive([ip()]), [429]);

    let auth = [("authorization", "Bearer t")];
    let reset = servers[0].send("DELETE", "/admin/keys?ip=127.0.0.1", &auth, "");
    assert!(reset.starts_with("HTTP/1.1 200"), "{reset}");
    let started = Instant::now();
    while servers[1].statuses_kept_alive([ip()]) != [200] {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "the second server still refuses after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 40 concurrent `/api/tokens?n=10000` for one user on Redis (1,000 tokens
/// a minute, 100 reserved each): one is served, the rest refused, 10,000
/// tokens in all — the budget plus one request's overrun (before: 10
/// served, 100,000 tokens).
#[cfg(feature = "redis")]
#[test]
fn concurrent_costs_known_afterwards_overrun_once() {
    let redis = RedisServer::start();
    let server = ExampleServer::start(&[("REDIS_URL", &redis.url())]);
    let port = server.port;
    let threads: Vec<_> = (0..40)
        .map(|_| {
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let request = "GET /api/tokens?n=10000 HTTP/1.1\r\nhost: x\r\nx-user-id: eve\r\nconnection: close\r\n\r\n";
                stream.write_all(request.as_bytes()).unwrap();
                let mut response = String::new();
                let _ = stream.read_to_string(&mut response);
                response
            })
        })
        .collect();
    let responses: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let served: u32 = responses
        .iter()
        .filter(|r| r.starts_with("HTTP/1.1 200"))
        .map(|r| header(r, "x-tokens-used").unwrap().parse::<u32>().unwrap())
        .sum();
    assert!(
        (10_000..=1_000 + 10_000).contains(&served),
        "{served} tokens served"
    );
    assert!(responses
        .iter()
        .all(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.1 429")));
}

/// The shared capacity weighed tenants by `x-api-key` strings it never
/// checked: after the limits file rotated the keys, a retired enterprise
/// key kept its weight of 10 there (and the right one got 1), with no
/// failed check counted. Now one place resolves the tier for every route:
/// the retired key is a 401 on `/api/shared` as on `/api/key`, counted with
/// the failed key checks, and the new key weighs as enterprise.
#[test]
fn a_rotated_api_key_loses_its_tier_on_every_route() {
    let dir = std::env::temp_dir().join(format!("rotated-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("limits.toml");
    let demo = std::fs::read_to_string("examples/limits.toml").unwrap();
    std::fs::write(&file, &demo).unwrap();
    // Seven tenants from one address: more than it may bring at once.
    let mut server = ExampleServer::start(&[
        ("LIMITS_FILE", file.to_str().unwrap()),
        ("SHARED_TENANTS_PER_IP", "100"),
    ]);
    // The share a tenant of `key` is given (q of the capacity's policy), or
    // the status when it is refused.
    let share = |server: &ExampleServer, key: &str, tenant: &str| -> Result<u32, String> {
        let response = server.get("/api/shared", &[("x-api-key", key), ("x-user-id", tenant)]);
        header(&response, "ratelimit-policy")
            .filter(|p| p.starts_with("\"api_shared\""))
            .and_then(|p| p.split(";q=").nth(1)?.split(';').next()?.parse().ok())
            .ok_or_else(|| response.get(9..12).unwrap_or("").to_owned())
    };
    // Two tenants without a key are there first: a share is a part.
    for tenant in ["anon-a", "anon-b"] {
        assert!(server
            .get("/api/shared", &[("x-user-id", tenant)])
            .starts_with("HTTP/1.1 200"));
    }
    let enterprise = share(&server, "enterprise-demo", "e1").unwrap();
    let free = share(&server, "free-demo", "f1").unwrap();
    assert!(
        enterprise > 3 * free,
        "enterprise {enterprise}, free {free}"
    );

    std::fs::write(
        &file,
        demo.replace("enterprise-demo = ", "enterprise-2027 = "),
    )
    .unwrap();
    let live = std::iter::from_fn(|| server.line_starting("limits: version"))
        .find(|line| line.ends_with(" live"));
    assert!(live.is_some(), "the rotated file did not run");
    let rotated = share(&server, "enterprise-2027", "e2").unwrap();
    let free = share(&server, "free-demo", "f2").unwrap();
    assert!(rotated > 3 * free, "the new key {rotated}, free {free}");
    assert_eq!(share(&server, "enterprise-demo", "e3"), Err("401".into()));
    // The retired key counts as a failed check, as on /api/key: 10 a
    // minute per address, the one above and these 9, then everything from
    // that address is refused, the right key included.
    let guesses: Vec<_> = (0..9)
        .map(|_| share(&server, "enterprise-demo", "e3"))
        .collect();
    assert!(
        guesses.iter().all(|s| *s == Err("401".into())),
        "{guesses:?}"
    );
    assert_eq!(share(&server, "enterprise-2027", "e2"), Err("429".into()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One client inventing user ids filled an 8 MB Redis in about 20 s (41,773
/// ids), then every decision failed. Now the routes keyed by a client's id
/// take at most `IDS_PER_IP` requests a second from one address, so its
/// keys in Redis grow at most that fast; and a full Redis is told apart
/// from an outage on the health line.
#[cfg(feature = "redis")]
#[test]
fn made_up_ids_fill_redis_no_faster_than_the_per_address_limit() {
    let redis = RedisServer::start();
    let mut server = ExampleServer::start(&[("REDIS_URL", &redis.url()), ("IDS_PER_IP", "50")]);
    // The limiter's keys only (`rl:`): the fleet's copy of the limits is
    // written once, a moment after start, and on a busy machine that
    // moment can fall within the flood.
    let keys = |redis: &RedisServer| -> u64 {
        redis
            .cli(&["--scan", "--pattern", "rl:*"])
            .lines()
            .filter(|l| !l.is_empty())
            .count() as u64
    };
    let before = keys(&redis);
    let started = Instant::now();
    let statuses =
        server.statuses_kept_alive((0..1500).map(|i| {
            format!("GET /api/user HTTP/1.1\r\nhost: x\r\nx-user-id: made-up-{i}\r\n\r\n")
        }));
    let seconds = started.elapsed().as_secs_f64();
    let made = keys(&redis) - before;
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    eprintln!("1500 made-up ids in {seconds:.1} s: {admitted} admitted, {made} keys made");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    // At most 50 a second (a sliding window: up to twice that in the
    // first second), each admitted request one key.
    let bound = (50.0 * (seconds + 2.0)) as u64;
    assert!(
        made <= bound,
        "{made} keys in {seconds:.1} s, at most {bound}"
    );
    assert_eq!(made, admitted as u64);

    // Full: every decision fails, and the health line says why.
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    // (From another address: this one's budget is spent.)
    KeptAlive::from(2, server.port)
        .status("GET /api/user HTTP/1.1\r\nhost: x\r\nx-user-id: after\r\n\r\n");
    let line = server.line_starting("redis: failing");
    assert!(
        line.as_deref().is_some_and(|l| l.contains("out_of_memory")),
        "{line:?}"
    );
}

/// With a small key cap (`MAX_KEYS=2000`), one address made up 10,000 login
/// users, failing each 5 times and then once more: their lockouts pushed
/// its own lockout on a real user out of memory, and the right password
/// got in. Now one address fails at most 50 logins per 15 minutes whatever
/// the user (and one more each 18 s the flood lasts), so it makes at most
/// 10 lockouts: its lockout holds (and another address's login of that
/// user is its own).
#[test]
fn made_up_login_users_do_not_lift_a_lockout() {
    let server = ExampleServer::start(&[("MAX_KEYS", "2000"), ("IDS_PER_IP", "1000000")]);
    let login = |user: &str, password: &str| {
        let body = format!("user={user}&password={password}");
        format!("POST /api/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n{body}", body.len())
    };
    let began = Instant::now();
    let statuses = server.statuses_kept_alive((0..6).map(|_| login("ann", "wrong")));
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
    let started = Instant::now();
    let flood =
        (0..10_000).flat_map(|i| (0..6).map(move |_| login(&format!("made-up-{i}"), "wrong")));
    let statuses = server.statuses_kept_alive(flood);
    let failed = statuses.iter().filter(|s| **s == 401).count();
    eprintln!(
        "60,000 failing logins of made-up users in {:?}: {failed} answered 401",
        started.elapsed()
    );
    // The lockout itself is one of the 50; the limit gives one back each
    // 18 s (50 per 15 minutes), which a loaded machine's flood may last.
    let given_back = (began.elapsed().as_secs_f64() / 18.0).ceil() as usize;
    assert!(
        (45..=45 + given_back).contains(&failed),
        "{failed} failures answered, 45 and {given_back} given back at most"
    );
    let statuses = server.statuses_kept_alive([login("ann", "demo")]);
    assert_eq!(statuses, [429], "the lockout was lifted");
    let mut elsewhere = KeptAlive::from(2, server.port);
    assert_eq!(elsewhere.status(&login("ann", "demo")), 200);
}

/// A port already taken: the server says which address it could not
/// listen on and how to choose another (it printed `Os { code: 98, kind:
/// AddrInUse }` alone).
#[test]
fn a_busy_port_is_named_with_the_way_out() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let said = crate::support::example::refusal(&[("ADDR", &addr)]);
    assert!(said.contains(&format!("cannot listen on {addr}")), "{said}");
    assert!(said.contains("set ADDR"), "{said}");
}

/// A rate in the environment past a quota's finest (one a microsecond) is
/// named at start with the range it takes: `IDS_PER_IP=1000000000` passed
/// the check when read and panicked as the routes were built.
#[test]
fn a_rate_too_fine_is_named_at_start() {
    for name in ["IDS_PER_IP", "SHARED_PER_IP", "SHARED_CAPACITY"] {
        let said = crate::support::example::refusal(&[(name, "1000000000")]);
        assert!(
            said.contains(name) && said.contains("1 to 1000000"),
            "{said}"
        );
        assert!(!said.contains("panicked"), "{said}");
    }
    for count in ["0", "1000001", "four"] {
        let said = crate::support::example::refusal(&[("SHARED_TENANTS_PER_IP", count)]);
        assert!(
            said.contains("SHARED_TENANTS_PER_IP") && said.contains("1 to 1000000"),
            "{said}"
        );
    }
}

/// One address inventing tenant ids for `/api/shared` brings at most
/// `SHARED_TENANTS_PER_IP` of them each 2 s (4, then one each half second
/// it took); a refused id stays new, so asking again does not get it in;
/// one it brought is served again; another address brings its own.
/// Without the limit 15 of the 20 were served, each diluting the real
/// tenants' shares.
#[test]
fn an_address_brings_few_tenants_to_the_shared_capacity() {
    let server = ExampleServer::start(&[]);
    let ask = |from: &mut KeptAlive, id: &str| {
        from.status(&format!(
            "GET /api/shared HTTP/1.1\r\nhost: x\r\nx-user-id: {id}\r\n\r\n"
        ))
    };
    let mut inventor = KeptAlive::from(2, server.port);
    let started = Instant::now();
    let first: Vec<u16> = (0..20)
        .map(|i| ask(&mut inventor, &format!("made-up-{i}")))
        .collect();
    let again: Vec<u16> = (0..20)
        .map(|i| ask(&mut inventor, &format!("made-up-{i}")))
        .collect();
    // The 4 of the burst, and one more each half second the asking took.
    let most = 4 + (started.elapsed().as_secs_f64() / 0.5) as usize;
    let brought = |statuses: &[u16]| statuses.iter().filter(|s| **s == 200).count();
    assert!(first.iter().all(|s| *s == 200 || *s == 429), "{first:?}");
    assert!(
        (4..=most).contains(&brought(&first)),
        "{first:?}, at most {most}"
    );
    // A refused id asking again is new again: only the ids brought before,
    // and as many new ones as the period let in, are served.
    let served_again = first
        .iter()
        .zip(&again)
        .filter(|(before, now)| **before == 429 && **now == 200)
        .count();
    assert!(
        brought(&first) + served_again <= most,
        "first {first:?}, again {again:?}, at most {most}"
    );
    assert!(
        first
            .iter()
            .zip(&again)
            .all(|(before, now)| *before != 200 || *now == 200),
        "first {first:?}, again {again:?}"
    );
    let mut other = KeptAlive::from(3, server.port);
    assert!(
        (0..4).all(|i| ask(&mut other, &format!("other-{i}")) == 200),
        "another address brings its own"
    );
}
