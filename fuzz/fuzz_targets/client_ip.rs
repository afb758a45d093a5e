//! Client addresses from forwarding headers: any bytes never panic, an
//! untrusted peer is always the client, and a trusted proxy's header can
//! only name an address that is in it.
#![no_main]

use std::net::{IpAddr, SocketAddr};

use http::{HeaderValue, Request};
use libfuzzer_sys::fuzz_target;
use tower_ratelimit::key::RequestHead;
use tower_ratelimit::key::{ClientIp, ForwardedHeader, KeyExtractor, PeerAddr};

fuzz_target!(|data: &[u8]| {
    let Some((&choice, value)) = data.split_first() else {
        return;
    };
    let Ok(value) = HeaderValue::from_bytes(value) else {
        return; // http refuses it: it cannot reach an extractor
    };
    let (header, name) = match choice % 3 {
        0 => (ForwardedHeader::XForwardedFor, "x-forwarded-for"),
        1 => (ForwardedHeader::Forwarded, "forwarded"),
        _ => (ForwardedHeader::XRealIp, "x-real-ip"),
    };
    let by_networks = ClientIp::new()
        .trust_networks(["10.0.0.0/8".parse().unwrap()])
        .header(header);
    let by_hops = ClientIp::new()
        .trust_hops(usize::from(choice / 3 % 4))
        .header(header);
    for peer in ["10.0.0.1:443", "192.0.2.1:443"] {
        let mut req = Request::get("/")
            .header(name, value.clone())
            .body(())
            .unwrap();
        let peer: SocketAddr = peer.parse().unwrap();
        req.extensions_mut().insert(PeerAddr(peer));
        let head = RequestHead::from(&req);
        let client = by_networks.client_addr(&head).unwrap();
        let trusted = matches!(peer.ip(), IpAddr::V4(v4) if v4.octets()[0] == 10);
        if !trusted {
            assert_eq!(client, peer.ip(), "an untrusted peer is the client");
        } else if client != peer.ip() {
            // Named in the header, in some spelling.
            let text = String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase();
            let short = match client {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => v6.to_string(),
            };
            assert!(
                text.contains(&short)
                    || matches!(client, IpAddr::V6(_))
                    || text.contains("::ffff:"),
                "{client} from {text:?}"
            );
        }
        let _ = by_hops.client_addr(&head);
        let _ = by_networks.extract(&head);
    }
});
