//! A real tonic server behind the layer, called by a real tonic client: a
//! limited call is a gRPC `RESOURCE_EXHAUSTED` with a retry hint, not an
//! HTTP 429; keys come from gRPC metadata.

use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower_ratelimit::key::Header;
use tower_ratelimit::{Policy, RateLimitLayer};

async fn check(
    client: &mut HealthClient<tonic::transport::Channel>,
    tenant: Option<&str>,
) -> Result<(), tonic::Status> {
    let mut req = Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if let Some(tenant) = tenant {
        req.metadata_mut()
            .insert("x-tenant", tenant.parse().unwrap());
    }
    client.check(req).await.map(|_| ())
}

#[tokio::test]
async fn a_limited_call_is_resource_exhausted_with_a_retry_hint() {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limiter = RateLimitLayer::new("calls = 2/min".parse::<Policy>().unwrap())
        .key(Header::new("x-tenant"));
    let server = tonic::transport::Server::builder()
        .layer(limiter)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);

    assert!(check(&mut client, Some("acme")).await.is_ok());
    assert!(check(&mut client, Some("acme")).await.is_ok());
    let limited = check(&mut client, Some("acme")).await.unwrap_err();
    assert_eq!(limited.code(), Code::ResourceExhausted, "{limited:?}");
    assert!(
        limited
            .message()
            .starts_with("rate limit exceeded; retry in "),
        "{limited:?}"
    );
    let pushback: u64 = limited
        .metadata()
        .get("grpc-retry-pushback-ms")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Within two windows: the default sliding window weighs the previous one.
    assert!((1_000..=120_000).contains(&pushback), "{pushback}");
    assert_eq!(
        limited.metadata().get("x-ratelimit-remaining").unwrap(),
        "0"
    );

    // Another tenant has its own budget; a call without the key is refused
    // as an invalid argument, also as a gRPC status.
    assert!(check(&mut client, Some("globex")).await.is_ok());
    assert_eq!(
        check(&mut client, None).await.unwrap_err().code(),
        Code::InvalidArgument
    );
}
