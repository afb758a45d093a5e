//! Key extractors under hostile input: they never panic, never let one
//! client take another's key, and never let a client pick its own address.

use http::HeaderName;
use http::Request;
use proptest::prelude::*;
use tower_ratelimit::key::Key;
use tower_ratelimit::key::RequestHead;
use tower_ratelimit::key::{
    ApiKey, ClientIp, ForwardedHeader, Global, Header, KeyError, KeyExtractor, MAX_KEY_VALUE,
};

fn req(peer: &str, headers: &[(&str, &[u8])]) -> Request<()> {
    crate::support::request(peer, headers)
}

fn key(extractor: &impl KeyExtractor, req: &Request<()>) -> Result<Key, KeyError> {
    extractor.extract(&RequestHead::from(req))
}

fn ip_of(extractor: &ClientIp, req: &Request<()>) -> String {
    extractor
        .client_addr(&RequestHead::from(req))
        .unwrap()
        .to_string()
}

#[test]
fn spoofed_forwarding_headers_from_an_untrusted_peer_are_ignored() {
    let spoof: &[(&str, &[u8])] = &[
        ("x-forwarded-for", b"1.2.3.4"),
        ("forwarded", b"for=1.2.3.4"),
        ("x-real-ip", b"1.2.3.4"),
    ];
    let r = req("198.51.100.7:5000", spoof);
    assert_eq!(ip_of(&ClientIp::new(), &r), "198.51.100.7");
    let behind_proxies = ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()]);
    assert_eq!(
        ip_of(&behind_proxies, &r),
        "198.51.100.7",
        "peer is not a proxy"
    );
}

#[test]
fn through_trusted_proxies_the_rightmost_untrusted_address_is_the_client() {
    let trusted = ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()]);
    // The client claims to be 1.1.1.1; our proxy appended the real address.
    let r = req(
        "10.0.0.1:1",
        &[("x-forwarded-for", b"1.1.1.1, 203.0.113.5, 10.0.0.9")],
    );
    assert_eq!(ip_of(&trusted, &r), "203.0.113.5");
    // Several headers are one list.
    let r = req(
        "10.0.0.1:1",
        &[
            ("x-forwarded-for", b"1.1.1.1"),
            ("x-forwarded-for", b"203.0.113.5"),
        ],
    );
    assert_eq!(ip_of(&trusted, &r), "203.0.113.5");
    // Garbage to the left of the real client changes nothing.
    let r = req(
        "10.0.0.1:1",
        &[("x-forwarded-for", b"<script>, 203.0.113.5")],
    );
    assert_eq!(ip_of(&trusted, &r), "203.0.113.5");
    // Nor do bytes that are not even UTF-8.
    let r = req(
        "10.0.0.1:1",
        &[("x-forwarded-for", b"\xff\xfe, 203.0.113.5")],
    );
    assert_eq!(ip_of(&trusted, &r), "203.0.113.5");
    // A proxy that forwarded nothing is itself the client.
    assert_eq!(ip_of(&trusted, &req("10.0.0.1:1", &[])), "10.0.0.1");
}

#[test]
fn hop_counts_take_the_address_that_many_hops_back() {
    let two_proxies = ClientIp::new().trust_hops(2);
    // client → proxy A (appends client) → proxy B (appends A) → us.
    let r = req(
        "192.0.2.2:1",
        &[("x-forwarded-for", b"6.6.6.6, 203.0.113.5, 192.0.2.1")],
    );
    assert_eq!(ip_of(&two_proxies, &r), "203.0.113.5");
}

#[test]
fn forwarded_and_x_real_ip_are_read_only_when_chosen() {
    let via = |h| ClientIp::new().trust_hops(1).header(h);
    let r = req(
        "10.0.0.1:1",
        &[
            (
                "forwarded",
                b"for=192.0.2.60;proto=http;by=203.0.113.43, for=\"[2001:db8:cafe::17]:4711\"",
            ),
            ("x-forwarded-for", b"198.51.100.1"),
            ("x-real-ip", b"198.51.100.2"),
        ],
    );
    assert_eq!(
        ip_of(&via(ForwardedHeader::Forwarded), &r),
        "2001:db8:cafe::17"
    );
    assert_eq!(
        ip_of(&via(ForwardedHeader::XForwardedFor), &r),
        "198.51.100.1"
    );
    assert_eq!(ip_of(&via(ForwardedHeader::XRealIp), &r), "198.51.100.2");
}

#[test]
fn ipv6_is_grouped_by_prefix_and_mapped_ipv4_is_ipv4() {
    let ip = ClientIp::new();
    let a = key(&ip, &req("[2001:db8:1:2:aaaa::1]:1", &[])).unwrap();
    let b = key(&ip, &req("[2001:db8:1:2:bbbb::9]:1", &[])).unwrap();
    let other = key(&ip, &req("[2001:db8:1:3::1]:1", &[])).unwrap();
    assert_eq!(a, b, "one /64, one client");
    assert_ne!(a, other);
    let narrow = ClientIp::new().ipv6_prefix(128);
    assert_ne!(
        key(&narrow, &req("[2001:db8:1:2:aaaa::1]:1", &[])).unwrap(),
        key(&narrow, &req("[2001:db8:1:2:bbbb::9]:1", &[])).unwrap()
    );
    let mapped = key(&ip, &req("[::ffff:192.0.2.1]:1", &[])).unwrap();
    assert_eq!(mapped, key(&ip, &req("192.0.2.1:1", &[])).unwrap());
    assert_eq!(mapped.value(), [192, 0, 2, 1]);
}

#[test]
fn no_peer_address_is_a_missing_key() {
    let r = Request::get("/").body(()).unwrap();
    assert_eq!(key(&ClientIp::new(), &r), Err(KeyError::NoPeerAddress));
}

#[test]
fn user_headers_take_any_bytes_but_not_too_many_or_twice() {
    let h = Header::new("x-user-id");
    let latin1 = key(&h, &req("1.1.1.1:1", &[("x-user-id", b"caf\xe9")])).unwrap();
    let ascii = key(&h, &req("1.1.1.1:1", &[("x-user-id", b"cafe")])).unwrap();
    assert_ne!(latin1, ascii);
    assert_eq!(latin1.value(), b"caf\xe9");

    let long = vec![b'a'; MAX_KEY_VALUE + 1];
    assert_eq!(
        key(&h, &req("1.1.1.1:1", &[("x-user-id", &long)])),
        Err(KeyError::InvalidHeader(
            HeaderName::from_static("x-user-id"),
            "too long"
        ))
    );
    let exact = vec![b'a'; MAX_KEY_VALUE];
    assert!(key(&h, &req("1.1.1.1:1", &[("x-user-id", &exact)])).is_ok());
    assert_eq!(
        key(
            &h,
            &req("1.1.1.1:1", &[("x-user-id", b"a"), ("x-user-id", b"b")])
        ),
        Err(KeyError::InvalidHeader(
            HeaderName::from_static("x-user-id"),
            "sent more than once"
        ))
    );
    assert_eq!(
        key(&h, &req("1.1.1.1:1", &[("x-user-id", b"")])),
        Err(KeyError::MissingHeader(HeaderName::from_static(
            "x-user-id"
        )))
    );
}

#[test]
fn kinds_of_key_never_collide() {
    // The address 65.66.67.68 is the bytes "ABCD".
    let r = req(
        "65.66.67.68:1",
        &[("x-user-id", b"ABCD"), ("x-other", b"ABCD")],
    );
    let user = key(&Header::new("x-user-id"), &r).unwrap();
    let other = key(&Header::new("x-other"), &r).unwrap();
    let ip = key(&ClientIp::new(), &r).unwrap();
    assert_eq!(ip.value(), user.value());
    assert_ne!(user, ip);
    assert_ne!(user, other);
    // Composites: (a, bc) is not (ab, c).
    let ab_c = Key::composite(&[Key::new("x", "ab"), Key::new("x", "c")]);
    let a_bc = Key::composite(&[Key::new("x", "a"), Key::new("x", "bc")]);
    assert_ne!(ab_c, a_bc);
    let pair = key(&(Header::new("x-user-id"), Global), &r).unwrap();
    assert_ne!(pair, user);
}

#[test]
fn one_api_key_is_one_identity_on_every_server_given_one_secret() {
    // Two servers build their extractors apart, from the same configuration.
    let (server_a, server_b) = (ApiKey::bearer("shared"), ApiKey::bearer("shared"));
    let r = req("1.1.1.1:1", &[("authorization", b"Bearer sk-123")]);
    assert_eq!(key(&server_a, &r).unwrap(), key(&server_b, &r).unwrap());
    // And in every process: nothing of this one's (no random salt) goes in.
    // The first 16 bytes of HMAC-SHA256 under "shared" of "sk-123", as
    // Python's hmac module computes them.
    let expected = [
        0x79, 0x0e, 0x96, 0xf5, 0x9c, 0x4a, 0xa0, 0xe4, 0x6b, 0x6a, 0xef, 0xed, 0xba, 0x25, 0x91,
        0x37,
    ];
    assert_eq!(key(&server_a, &r).unwrap(), Key::new("api-key", expected));
}

#[test]
fn api_keys_are_hashed_under_the_secret() {
    let bearer = ApiKey::bearer("s3cret");
    let r = |v: &[u8]| req("1.1.1.1:1", &[("authorization", v)]);
    let a = key(&bearer, &r(b"Bearer sk-123")).unwrap();
    assert_eq!(
        a,
        key(&bearer, &r(b"bearer   sk-123 ")).unwrap(),
        "scheme is case-insensitive"
    );
    assert_ne!(a, key(&bearer, &r(b"Bearer sk-124")).unwrap());
    assert_ne!(
        a,
        key(&ApiKey::bearer("other"), &r(b"Bearer sk-123")).unwrap()
    );
    assert!(!a.value().windows(6).any(|w| w == b"sk-123"));
    assert_eq!(
        key(&bearer, &r(b"Basic dXNlcg==")),
        Err(KeyError::MissingHeader(http::header::AUTHORIZATION))
    );
    assert_eq!(
        key(&bearer, &r(b"Bearer ")),
        Err(KeyError::MissingHeader(http::header::AUTHORIZATION))
    );
    let huge = [b"Bearer ".as_slice(), &vec![b'k'; 2000]].concat();
    assert_eq!(
        key(&bearer, &r(&huge)),
        Err(KeyError::InvalidHeader(
            http::header::AUTHORIZATION,
            "too long"
        ))
    );
}

proptest! {
    /// Any header bytes at all: every extractor answers, none panics, and a
    /// forwarded address is only ever taken through a trusted peer.
    #[test]
    fn hostile_header_bytes_never_panic(
        value in prop::collection::vec(prop::num::u8::ANY.prop_filter("header bytes", |b| *b == b'\t' || (*b >= 0x20 && *b != 0x7f)), 0..600),
        peer_trusted in any::<bool>(),
    ) {
        let peer = if peer_trusted { "10.0.0.1:1" } else { "198.51.100.7:1" };
        let headers: Vec<(&str, &[u8])> = ["x-forwarded-for", "forwarded", "x-real-ip", "x-user-id", "authorization", "x-api-key"]
            .into_iter()
            .map(|name| (name, value.as_slice()))
            .collect();
        let r = req(peer, &headers);
        let trusted = ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()]);
        for header in [ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded, ForwardedHeader::XRealIp] {
            let ip = trusted.clone().header(header).client_addr(&RequestHead::from(&r)).unwrap();
            if !peer_trusted {
                prop_assert_eq!(ip.to_string(), "198.51.100.7");
            } else {
                // Through a trusted peer: the peer, or an address the
                // header names.
                let text = String::from_utf8_lossy(&value);
                prop_assert!(ip.to_string() == "10.0.0.1" || text.contains(&ip.to_string()), "{} from {}", ip, text);
            }
            let _ = ClientIp::new().trust_hops(3).header(header).extract(&RequestHead::from(&r));
        }
        let _ = key(&Header::new("x-user-id"), &r);
        let _ = key(&ApiKey::bearer("s"), &r);
        let _ = key(&ApiKey::header("x-api-key", "s"), &r);
    }
}

proptest! {
    /// Address lists as proxies write them, with junk among them: through a
    /// trusted peer the client is the peer or an address of the list,
    /// never one of the trusted network's unless nothing else is there.
    #[test]
    fn forwarded_lists_name_a_listed_client(
        list in prop::collection::vec(
            prop_oneof![
                any::<[u8; 4]>().prop_map(|o| std::net::Ipv4Addr::from(o).to_string()),
                any::<[u8; 4]>().prop_map(|o| format!("10.{}.{}.{}", o[1], o[2], o[3])),
                any::<[u16; 8]>().prop_map(|s| std::net::Ipv6Addr::from(s).to_string()),
                "[a-z0-9:.\\[\\] ]{0,12}",
            ],
            0..40,
        ),
    ) {
        let header = list.join(", ");
        let r = req("10.0.0.1:1", &[("x-forwarded-for", header.as_bytes())]);
        let trusted = ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()]);
        let ip = trusted.client_addr(&RequestHead::from(&r)).unwrap();
        let listed = list.iter().any(|entry| entry.trim() == ip.to_string());
        prop_assert!(ip.to_string() == "10.0.0.1" || listed, "{} from {}", ip, header);
        // An untrusted address right of every junk entry is the client.
        let rightmost = list.iter().rev().map(|e| e.trim()).find(|e| !e.starts_with("10.") || e.parse::<std::net::IpAddr>().is_err());
        if let Some(Ok(addr)) = rightmost.map(str::parse::<std::net::IpAddr>) {
            prop_assert_eq!(ip, addr, "from {}", header);
        }
    }
}
