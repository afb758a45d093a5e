//! Every terminal session in README.md and the guide, replayed as written:
//! the example server started with the session's environment, each `$`
//! command run by `sh` against it, and each line the session shows found in
//! what the command printed or the server printed meanwhile, in order.
//!
//! A session shows what a user sees, less what varies: numbers that depend
//! on the moment (after `x-ratelimit-reset:`, `t=`, `retry-after:`,
//! `retry_after_seconds`, `reset_seconds`, `elapsed`, and an adaptive
//! limit's share of failures and counts of responses and clients) match
//! any number, `…` or `...` stand for any text, and lines the session
//! leaves out (`date:`, `content-length:`) may come between the lines it
//! shows.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::example::ExampleServer;

/// The sessions of a Markdown file: each `text` block whose first line is
/// a command (`$ `).
fn sessions(file: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let mut sessions = Vec::new();
    let mut block: Option<Vec<String>> = None;
    for line in text.lines() {
        match (&mut block, line) {
            (None, "```text") => block = Some(Vec::new()),
            (Some(_), "```") => {
                let lines = block.take().unwrap();
                if lines.first().is_some_and(|l| l.starts_with("$ ")) {
                    sessions.push(lines);
                }
            }
            (Some(lines), line) => lines.push(line.to_owned()),
            (None, _) => {}
        }
    }
    sessions
}

/// `line` with every number that depends on the moment made `#`.
fn steady(line: &str) -> String {
    const VARYING: [&str; 9] = [
        "x-ratelimit-reset: ",
        "t=",
        "retry-after: ",
        "\"retry_after_seconds\":",
        "\"reset_seconds\":",
        "elapsed ",
        "sha256:",
        "failures in ",
        "responses from ",
    ];
    let mut out = line.to_owned();
    for marker in VARYING {
        let mut from = 0;
        while let Some(at) = out[from..].find(marker).map(|at| from + at + marker.len()) {
            let digits = out[at..]
                .find(|c: char| !(c.is_ascii_hexdigit() || c == '.' || c == 's'))
                .unwrap_or(out.len() - at);
            if digits > 0 {
                out.replace_range(at..at + digits, "#");
            }
            from = at;
        }
    }
    // The share of failures a random failure rate gave: `19.5% failures`.
    if let Some(at) = out.find("% failures") {
        let start = out[..at]
            .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
            .map_or(0, |i| i + 1);
        out.replace_range(start..at, "#");
    }
    out
}

/// Whether `actual` is what `shown` shows: equal but for varying numbers,
/// with `…` and `...` standing for any text.
fn shows(shown: &str, actual: &str) -> bool {
    let (shown, actual) = (steady(shown.trim_end()), steady(actual.trim_end()));
    let shown = shown.replace("...", "…");
    let parts: Vec<&str> = shown.split('…').collect();
    if parts.len() == 1 {
        return shown == actual;
    }
    let mut rest = actual.as_str();
    for (i, part) in parts.iter().enumerate() {
        let found = if i == 0 {
            rest.starts_with(part).then_some(0)
        } else if i == parts.len() - 1 {
            rest.ends_with(part).then(|| rest.len() - part.len())
        } else {
            rest.find(part)
        };
        let Some(at) = found else { return false };
        rest = &rest[at + part.len()..];
    }
    true
}

/// A command as the user types it, made to run here: the example binaries
/// built beside this test, and the server's port.
fn runnable(command: &str, port: u16) -> String {
    let examples = crate::support::example::binary();
    let examples = examples.parent().unwrap().display().to_string();
    let mut command = command
        .replace("localhost:3000", &format!("127.0.0.1:{port}"))
        .replace("127.0.0.1:3000", &format!("127.0.0.1:{port}"));
    while let Some(at) = command.find("cargo run --example ") {
        let rest = &command[at + "cargo run --example ".len()..];
        let name_end = rest.find(' ').unwrap_or(rest.len());
        let name = rest[..name_end].to_owned();
        let after = rest[name_end..].trim_start();
        let after = after.strip_prefix("-- ").unwrap_or(after).to_owned();
        command = format!("{}{examples}/{name} {after}", &command[..at]);
    }
    command
}

/// Replays one session, panicking with what differs.
fn replay(session: &[String]) {
    let mut server: Option<ExampleServer> = None;
    let mut lines = session.iter().peekable();
    while let Some(line) = lines.next() {
        let command = line
            .strip_prefix("$ ")
            .expect("a session goes command by command");
        let mut shown = Vec::new();
        while let Some(next) = lines.next_if(|l| !l.starts_with("$ ")) {
            shown.push(next.clone());
        }
        if let Some(start) = command.strip_suffix("cargo run --example server &") {
            let env: Vec<(&str, &str)> = start
                .split_whitespace()
                .filter_map(|assignment| assignment.split_once('='))
                .collect();
            server = Some(ExampleServer::start(&env));
            continue;
        }
        let running = server
            .as_ref()
            .expect("a session starts the example server first");
        // What the server printed before this command is not its output.
        while running.printed_line().is_some() {}
        let output = Command::new("sh")
            .args(["-c", &runnable(command, running.port)])
            .output()
            .unwrap_or_else(|e| panic!("sh: {e}"));
        std::thread::sleep(Duration::from_millis(300));
        let printed = String::from_utf8_lossy(&output.stdout).replace('\r', "");
        let mut said: Vec<String> = printed.lines().map(str::to_owned).collect();
        let mut told: Vec<String> = std::iter::from_fn(|| running.printed_line()).collect();
        for expected in &shown {
            if matches!(expected.trim(), "..." | "…") {
                continue;
            }
            loop {
                let in_said = said.iter().position(|l| shows(expected, l));
                let in_told = told.iter().position(|l| shows(expected, l));
                match (in_said, in_told) {
                    (Some(at), _) => drop(said.drain(..=at)),
                    (None, Some(at)) => drop(told.drain(..=at)),
                    // A line the server prints as the command's effect may
                    // come late on a busy machine: wait for it (10 s).
                    (None, None) => match running.next_line() {
                        Some(line) => {
                            told.push(line);
                            continue;
                        }
                        None => panic!(
                            "`{command}` showed no line like\n  {expected}\nit printed:\n{printed}\nthe server printed:\n{}",
                            told.join("\n")
                        ),
                    },
                }
                break;
            }
        }
    }
}

fn replay_all(file: &str) {
    let curl = Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|out| out.status.success()),
        "the sessions run curl as a user would: install it (apt-get install curl); scripts/test does"
    );
    let found = sessions(file);
    assert!(!found.is_empty(), "{file} has sessions");
    for session in found {
        replay(&session);
    }
}

#[test]
fn the_example_server_sessions_replay_as_written() {
    replay_all("src/guide/example_server.md");
}

#[test]
fn the_fair_share_session_replays_as_written() {
    replay_all("src/guide/fairness.md");
}

#[test]
fn the_client_session_replays_as_written() {
    replay_all("src/guide/beyond_http.md");
}

#[test]
fn the_matching_is_strict_where_the_session_is() {
    assert!(shows("retry-after: 20", "retry-after: 7"));
    assert!(!shows("retry-after: 20", "retry-after: x"));
    assert!(shows("200 200 429", "200 200 429"));
    assert!(!shows("200 200 429", "200 429 429"));
    assert!(shows(
        r#"[...,{"route":"/a"},...]"#,
        r#"[{"route":"/z"},{"route":"/a"},{"route":"/b"}]"#
    ));
    assert!(!shows(r#"[...,{"route":"/a"},...]"#, r#"[{"route":"/b"}]"#));
}
