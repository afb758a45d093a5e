//! The example server's binary, run as a user runs it: its environment,
//! its output line by line (never waited on without a bound), killed when
//! dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The binary `cargo test` built next to this test binary's folder.
pub fn binary() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("examples").join("server"))
        .unwrap()
}

/// What the example server says when `env` stops it before it serves
/// (stderr, then stdout); it must stop with a failure.
pub fn refusal(env: &[(&str, &str)]) -> String {
    let mut command = Command::new(binary());
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().unwrap();
    assert!(!out.status.success(), "it started with {env:?}");
    String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
}

/// A running example server on `port`.
pub struct ExampleServer {
    child: Child,
    lines: Receiver<String>,
    /// Lines printed before it said it serves (a fleet joined at once,
    /// say): read first.
    earlier: std::sync::Mutex<std::collections::VecDeque<String>>,
    pub port: u16,
}

impl ExampleServer {
    /// Started with `env` on a free port, once it says it serves.
    pub fn start(env: &[(&str, &str)]) -> Self {
        Self::start_limited(env, None)
    }

    /// Started with `env` and, when given, at most `open_files` file
    /// descriptors (`ulimit -n`), once it says it serves.
    pub fn start_limited(env: &[(&str, &str)], open_files: Option<u32>) -> Self {
        Self::try_start_limited(env, open_files).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Started with `env` on a free port, once it says it serves; or what
    /// it printed if it stopped, or said nothing for 10 s, instead.
    pub fn try_start(env: &[(&str, &str)]) -> Result<Self, String> {
        Self::try_start_limited(env, None)
    }

    fn try_start_limited(env: &[(&str, &str)], open_files: Option<u32>) -> Result<Self, String> {
        let port = super::RedisServer::unused_port();
        let mut command = match open_files {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\"")])
                    .arg(binary());
                sh
            }
            None => Command::new(binary()),
        };
        command
            .env("ADDR", format!("127.0.0.1:{port}"))
            .env_remove("LIMITS_FILE")
            .env_remove("REDIS_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("{}: {e}", binary().display()))?;
        let (sender, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let mut earlier = std::collections::VecDeque::new();
        let started = loop {
            match lines.recv_timeout(Duration::from_secs(10)) {
                Ok(line) if line.starts_with("tower-ratelimit demo on") => break true,
                Ok(line) => earlier.push_back(line),
                Err(_) => break false,
            }
        };
        let server = Self {
            child,
            lines,
            earlier: std::sync::Mutex::new(earlier),
            port,
        };
        if !started {
            let said: Vec<_> = server.earlier.lock().unwrap().drain(..).collect();
            return Err(format!("{} did not start: {said:?}", binary().display()));
        }
        Ok(server)
    }

    /// Its next line, within 10 s.
    pub fn next_line(&self) -> Option<String> {
        self.earlier_line()
            .or_else(|| self.lines.recv_timeout(Duration::from_secs(10)).ok())
    }

    /// A line it has printed and not yet been read, without waiting.
    pub fn printed_line(&self) -> Option<String> {
        self.earlier_line().or_else(|| self.lines.try_recv().ok())
    }

    fn earlier_line(&self) -> Option<String> {
        let mut earlier = self.earlier.lock().unwrap_or_else(|p| p.into_inner());
        earlier.pop_front()
    }

    /// Its next line that starts with `prefix`, within 10 s a line.
    pub fn line_starting(&mut self, prefix: &str) -> Option<String> {
        std::iter::from_fn(|| self.next_line()).find(|line| line.starts_with(prefix))
    }

    /// `GET path` with `headers`: the whole response as text.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> String {
        self.send("GET", path, headers, "")
    }

    /// `method path` with `headers` and `body`: the whole response as text
    /// (empty when the connection was closed without one).
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
        plain_request(self.port, method, path, headers, body)
    }

    /// The status of each of `requests` (whole request texts, kept alive),
    /// sent one after another on one connection.
    pub fn statuses_kept_alive(&self, requests: impl IntoIterator<Item = String>) -> Vec<u16> {
        let mut connection = KeptAlive::to(self.port);
        requests
            .into_iter()
            .map(|request| connection.status(&request))
            .collect()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its resident memory, in KiB (from `/proc`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for ExampleServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request to `127.0.0.1:port` on a connection of its own:
/// the whole response as text (empty when the connection was refused or
/// closed without one), read within 10 s.
pub fn plain_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let _ = stream.write_all(request.as_bytes());
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// One kept-alive connection to a server on `port`.
pub struct KeptAlive {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl KeptAlive {
    pub fn to(port: u16) -> Self {
        Self::kept(TcpStream::connect(("127.0.0.1", port)).unwrap())
    }

    /// From the loopback address `127.0.0.<client>`: a client of an
    /// address of its own, as the server's limits per client IP see it.
    pub fn from(client: u8, port: u16) -> Self {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, client], 0)))
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let server = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let stream = runtime.block_on(socket.connect(server)).unwrap();
        let stream = stream.into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        Self::kept(stream)
    }

    fn kept(stream: TcpStream) -> Self {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Self { stream, reader }
    }

    /// Send `request` and read its answer's status, or none when the
    /// server closed the connection (or reset it) instead of answering.
    pub fn try_status(&mut self, request: &str) -> Option<u16> {
        self.stream.write_all(request.as_bytes()).ok()?;
        let mut status = String::new();
        self.reader.read_line(&mut status).ok()?;
        if status.is_empty() {
            return None;
        }
        self.read_rest(status)
    }

    /// Send `request` (a whole request text) and read the answer: its
    /// status.
    pub fn status(&mut self, request: &str) -> u16 {
        self.try_status(request)
            .expect("the server closed the connection")
    }

    /// The rest of an answer whose status line is `status`: its status.
    fn read_rest(&mut self, status: String) -> Option<u16> {
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).ok()?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().ok()?;
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).ok()?;
        Some(status.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0))
    }
}
