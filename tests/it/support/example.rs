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

/// A running example server on `port`.
pub struct ExampleServer {
    child: Child,
    lines: Receiver<String>,
    pub port: u16,
}

impl ExampleServer {
    /// Started with `env` on a free port, once it says it serves.
    pub fn start(env: &[(&str, &str)]) -> Self {
        let port = super::RedisServer::unused_port();
        let mut command = Command::new(binary());
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
            .unwrap_or_else(|e| panic!("{}: {e}", binary().display()));
        let (sender, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let mut server = Self { child, lines, port };
        let started = server.line_starting("tower-ratelimit demo on");
        assert!(started.is_some(), "{} did not start", binary().display());
        server
    }

    /// Its next line, within 10 s.
    pub fn next_line(&self) -> Option<String> {
        self.lines.recv_timeout(Duration::from_secs(10)).ok()
    }

    /// Its next line that starts with `prefix`, within 10 s a line.
    pub fn line_starting(&mut self, prefix: &str) -> Option<String> {
        std::iter::from_fn(|| self.next_line()).find(|line| line.starts_with(prefix))
    }

    /// `GET path` with `headers`: the whole response as text.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }
}

impl Drop for ExampleServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
