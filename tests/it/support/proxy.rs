//! A TCP link to a server that a test can slow down or cut: a late Redis,
//! or one application server partitioned from it; or that swaps one word
//! the client sends for another (a script's SHA for a faulty one's).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// A proxy to `127.0.0.1:target` on a port of its own. It hands on every
/// byte the server sends `latency` after it came (answers are late, none
/// waits behind another), and while cut holds every byte both ways (a
/// partition: TCP delivers what was held once the link heals, as it
/// would after retransmits). Runs until the runtime it started on ends.
pub struct Proxy {
    pub port: u16,
    link: Arc<Link>,
}

#[derive(Default)]
struct Link {
    latency_us: AtomicU64,
    cut: AtomicBool,
    /// What the client sends, swapped on the way: `(from, to)`, of one
    /// length so the protocol's lengths stay true.
    swap: Mutex<Option<(Vec<u8>, Vec<u8>)>>,
}

impl Proxy {
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let link = Arc::new(Link::default());
        let shared = link.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                // As a real link: no Nagle delay on top of the latency.
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, shared.clone(), false));
                tokio::spawn(pump(server_read, client_write, shared.clone(), true));
            }
        });
        Self { port, link }
    }

    /// A proxy that answers `latency` late from the start.
    pub async fn with_latency(target: u16, latency: Duration) -> Self {
        let proxy = Self::start(target).await;
        proxy.set_latency(latency);
        proxy
    }

    pub fn set_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.link.latency_us.store(us, Ordering::Relaxed);
    }

    /// From now on, `from` in what a client sends arrives as `to` (of the
    /// same length); `None` stops. A word split across two reads is
    /// missed: for words of a short command, sent in one write.
    pub fn swap(&self, words: Option<(&[u8], &[u8])>) {
        if let Some((from, to)) = words {
            assert_eq!(from.len(), to.len(), "a swap keeps lengths");
        }
        *self.link.swap.lock().unwrap() = words.map(|(f, t)| (f.to_vec(), t.to_vec()));
    }

    /// Cuts the link (`true`) or heals it (`false`).
    pub fn cut(&self, cut: bool) {
        self.link.cut.store(cut, Ordering::Relaxed);
    }
}

/// Hands `from`'s bytes to `to`: each chunk once the link is whole and,
/// when `late`, the latency after it came.
async fn pump(
    mut from: impl AsyncRead + Unpin + Send + 'static,
    mut to: impl AsyncWrite + Unpin,
    link: Arc<Link>,
    late: bool,
) {
    let (came, mut due) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            if came.send((Instant::now(), buffer[..n].to_vec())).is_err() {
                return;
            }
        }
    });
    while let Some((at, bytes)) = due.recv().await {
        if late {
            let latency = Duration::from_micros(link.latency_us.load(Ordering::Relaxed));
            tokio::time::sleep_until(at + latency).await;
        }
        while link.cut.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut bytes = bytes;
        if !late {
            if let Some((from, swapped)) = &*link.swap.lock().unwrap() {
                let mut at = 0;
                while let Some(i) = bytes[at..].windows(from.len()).position(|w| w == &from[..]) {
                    bytes[at + i..at + i + from.len()].copy_from_slice(swapped);
                    at += i + from.len();
                }
            }
        }
        if to.write_all(&bytes).await.is_err() {
            break;
        }
    }
    reader.abort();
}
