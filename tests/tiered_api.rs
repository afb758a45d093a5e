//! `examples/tiered_api.rs` over real HTTP, in a process of its own (it
//! installs the global metrics recorder): each claim of its docs.
#![cfg(feature = "metrics")]

#[allow(dead_code)]
#[path = "it/support/http.rs"]
mod http_support;
#[allow(dead_code)]
#[path = "../examples/tiered_api.rs"]
mod tiered_api;

use std::future::IntoFuture;

use http::{Method, StatusCode};
use http_support::send_from;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn the_tiered_api_does_what_its_docs_say() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = tiered_api::app(tiered_api::metrics().unwrap()).unwrap();
    let limits = tower_ratelimit::serve::ConnectionLimits::default();
    tokio::spawn(tower_ratelimit::serve::serve(listener, app, limits).into_future());
    let data = |client: u8, key: &'static str| async move {
        send_from(
            client,
            addr,
            Method::GET,
            "/api/data",
            &[("x-api-key", key)],
            "",
        )
        .await
    };

    // The free tier: 10 a minute per key; pro: 100, its own budget.
    let mut free = Vec::new();
    for _ in 0..11 {
        free.push(data(2, "free-key").await.0);
    }
    assert_eq!(free[..10], [StatusCode::OK; 10]);
    assert_eq!(free[10], StatusCode::TOO_MANY_REQUESTS);
    let (status, headers, _) = data(2, "pro-key").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-ratelimit-limit"], "100");

    // Unknown keys: 401, and the eleventh guess in a minute from one
    // address is refused, a right key included; another address is not.
    for n in 0..10 {
        assert_eq!(
            data(3, "guess").await.0,
            StatusCode::UNAUTHORIZED,
            "guess {n}"
        );
    }
    assert_eq!(data(3, "pro-key").await.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(data(4, "pro-key").await.0, StatusCode::OK);

    // Logins: 5 failures per address and user lock that user out there,
    // the right password included; successes never count.
    let login = |client: u8, form: &'static str| async move {
        let form_type = [("content-type", "application/x-www-form-urlencoded")];
        send_from(client, addr, Method::POST, "/login", &form_type, form)
            .await
            .0
    };
    for _ in 0..3 {
        assert_eq!(login(5, "user=ann&password=demo").await, StatusCode::OK);
    }
    for _ in 0..5 {
        assert_eq!(
            login(5, "user=ann&password=wrong").await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        login(5, "user=ann&password=demo").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(login(5, "user=bob&password=demo").await, StatusCode::OK);
    assert_eq!(login(6, "user=ann&password=demo").await, StatusCode::OK);

    // The user is decoded once: spellings of one name are one user, for
    // the limit as for the handler (17 spellings were 85 password checks).
    let spellings = [
        "ann",
        "%61nn",
        "a%6en",
        "an%6e",
        "%61%6e%6e",
        "%61%6En",
        "a%6En",
        "%61n%6e",
    ];
    // Of five wrong passwords for each of `users` from `client`, how many
    // were checked (401).
    let checked = |client: u8, users: Vec<String>| async move {
        let form_type = [("content-type", "application/x-www-form-urlencoded")];
        let mut checked = 0;
        for user in users {
            for _ in 0..5 {
                let form = format!("user={user}&password=wrong");
                let sent = send_from(client, addr, Method::POST, "/login", &form_type, &form);
                checked += usize::from(sent.await.0 == StatusCode::UNAUTHORIZED);
            }
        }
        checked
    };
    let checked_spellings = checked(7, spellings.map(String::from).to_vec()).await;
    assert_eq!(
        checked_spellings, 5,
        "password checks of one user under 8 spellings"
    );
    // A field sent twice, or badly encoded: 400, no password checked.
    assert_eq!(
        login(8, "user=x&user=ann&password=demo").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        login(8, "user=ann&password=demo&password=x").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        login(8, "user=%zz&password=demo").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        login(8, "user=%ff&password=demo").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(login(8, "user=a+b&password=demo").await, StatusCode::OK);

    // One address guessing across many users: 50 failures, whoever the
    // user, then every login from it is refused (300 users × 5 guesses
    // were 1,500 password checks); another address is not.
    let users = (0..60).map(|user| format!("u{user}")).collect();
    let checked_users = checked(9, users).await;
    assert_eq!(checked_users, 50, "password checks from one address");
    assert_eq!(
        login(9, "user=zoe&password=demo").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(login(10, "user=zoe&password=demo").await, StatusCode::OK);

    // Metrics: what was refused, by route and limit.
    let (status, _, text) = send_from(2, addr, Method::GET, "/metrics", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    let limited = r#"ratelimit_requests_total{outcome="limited",route="/api/data",limit="free"} 1"#;
    assert!(text.contains(limited), "{text}");

    // A login form that stalls is answered 408 once its time is out, and
    // the connection let go.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(([127, 0, 0, 12], 0).into()).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let head = "POST /login HTTP/1.1\r\nhost: x\r\n\
        content-type: application/x-www-form-urlencoded\r\ncontent-length: 100\r\n\r\nuser=ann";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let wait = tiered_api::FORM_TIMEOUT + std::time::Duration::from_secs(20);
    tokio::time::timeout(wait, stream.read_to_end(&mut answer))
        .await
        .expect("a stalled form is answered, not held")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}
