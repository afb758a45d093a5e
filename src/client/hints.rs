//! What a server's response says about when to send next: `Retry-After`,
//! the IETF `RateLimit` field, or `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::RETRY_AFTER;
use http::{HeaderMap, StatusCode};

/// The most a server hint may make a client wait: a day. A larger or
/// malformed value is ignored, never obeyed for ever.
const MAX_HINT: Duration = Duration::from_secs(24 * 3600);

/// What one response says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hint {
    /// Send nothing for this long (a refusal's `Retry-After`).
    pub(crate) pause: Option<Duration>,
    /// Requests left in the tightest limit, and when it is whole again.
    pub(crate) remaining: Option<(u64, Duration)>,
}

/// Read the hints of a response.
pub(crate) fn read(status: StatusCode, headers: &HeaderMap) -> Hint {
    let refused =
        status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE;
    let pause = refused.then(|| retry_after(headers)).flatten();
    let remaining = ietf(headers).or_else(|| legacy(headers));
    Hint { pause, remaining }
}

fn within_bounds(d: Duration) -> Option<Duration> {
    (d <= MAX_HINT).then_some(d)
}

/// `Retry-After`: delay seconds (an HTTP date is not read: every server of
/// this crate, and most others, send seconds).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    within_bounds(Duration::from_secs(secs))
}

/// `RateLimit: "a";r=9;t=1, "b";r=99;t=60`: the item with the fewest
/// remaining (then the longest reset).
fn ietf(headers: &HeaderMap) -> Option<(u64, Duration)> {
    let mut tightest: Option<(u64, Duration)> = None;
    for value in headers.get_all("ratelimit") {
        for item in value.to_str().ok()?.split(',') {
            let (mut r, mut t) = (None, None);
            for param in item.split(';').skip(1) {
                match param.trim().split_once('=') {
                    Some(("r", v)) => r = v.trim().parse::<u64>().ok(),
                    Some(("t", v)) => t = v.trim().parse::<u64>().ok(),
                    _ => {}
                }
            }
            let (Some(r), Some(t)) = (r, t) else { continue };
            let Some(t) = within_bounds(Duration::from_secs(t)) else {
                continue;
            };
            if tightest
                .is_none_or(|(r0, t0)| (r, std::cmp::Reverse(t)) < (r0, std::cmp::Reverse(t0)))
            {
                tightest = Some((r, t));
            }
        }
    }
    tightest
}

/// `X-RateLimit-Remaining` and `X-RateLimit-Reset` (Unix seconds, or
/// seconds from now when too small to be a date).
fn legacy(headers: &HeaderMap) -> Option<(u64, Duration)> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<u64>().ok();
    let remaining = number("x-ratelimit-remaining")?;
    let reset = number("x-ratelimit-reset")?;
    let reset = if reset > 1_000_000_000 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
        Duration::from_secs(reset.saturating_sub(now))
    } else {
        Duration::from_secs(reset)
    };
    Some((remaining, within_bounds(reset)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn reads_the_tightest_limit_and_the_pause() {
        let ok = headers(&[
            ("ratelimit", r#""s";r=0;t=1, "m";r=90;t=60"#),
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "30"),
        ]);
        assert_eq!(
            read(StatusCode::OK, &ok),
            Hint {
                pause: None,
                remaining: Some((0, Duration::from_secs(1)))
            }
        );
        let legacy = headers(&[("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "30")]);
        assert_eq!(
            read(StatusCode::OK, &legacy).remaining,
            Some((5, Duration::from_secs(30)))
        );
        let refused = headers(&[("retry-after", "7")]);
        assert_eq!(
            read(StatusCode::TOO_MANY_REQUESTS, &refused).pause,
            Some(Duration::from_secs(7))
        );
        // Only a refusal pauses; nonsense and absurd waits are ignored.
        assert_eq!(read(StatusCode::OK, &refused).pause, None);
        let hostile = headers(&[
            ("retry-after", "99999999999"),
            ("ratelimit", r#""x";r=zero;t=1, "y";r=1;t=99999999999"#),
        ]);
        assert_eq!(
            read(StatusCode::TOO_MANY_REQUESTS, &hostile),
            Hint::default()
        );
    }
}
