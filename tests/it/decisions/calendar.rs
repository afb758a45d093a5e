//! Calendar quotas: `1000/week`, `50000/month`, `50000/month from 15`,
//! `1000000/year`, at a fixed offset from UTC; their syntax, their periods
//! on the memory backend (Redis agrees: `redis_backend.rs`), and the reset
//! headers pointing at the period's real end.

use std::time::Duration;

use tower::ServiceExt;
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::layer::HeaderStyle;
use tower_ratelimit::policy::PolicyError;
use tower_ratelimit::quota::Period;
use tower_ratelimit::{Algorithm, Limit, Policy, Quota, RateLimitLayer};

use crate::support::http::ok;
use crate::support::request;

/// Seconds since the epoch of `when`, as `date -u` reads it: an oracle
/// that shares no code with the crate.
fn epoch(when: &str) -> u64 {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", when, "+%s"])
        .output()
        .expect("date runs");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("date -d {when:?}"))
}

fn at(when: &str) -> Micros {
    Micros::from_secs(epoch(when))
}

#[test]
fn calendar_quotas_read_and_write_the_quota_syntax() {
    for (text, period, day, offset) in [
        ("1000/week", Period::Week, 1, 0),
        ("50000/month", Period::Month, 1, 0),
        ("50000/month from 15", Period::Month, 15, 0),
        ("1000000/year", Period::Year, 1, 0),
        ("10/month from 31 utc-05:30", Period::Month, 31, -330),
        ("10/week utc+02:00", Period::Week, 1, 120),
    ] {
        let quota: Quota = text.parse().unwrap();
        let calendar = quota.calendar().unwrap();
        assert_eq!(
            (
                calendar.period(),
                calendar.starts_on_day(),
                calendar.utc_offset_minutes()
            ),
            (period, day, offset),
            "{text}"
        );
        assert_eq!(quota.to_string(), text);
    }
    assert_eq!(
        "5/months".parse::<Quota>().unwrap(),
        Quota::per_month(5).unwrap()
    );
    for (text, says) in [
        ("10/2month", "one calendar week, month or year"),
        ("10/month from 32", "from 1 to 31"),
        ("10/week from 3", "from 1 to 31, for a monthly quota"),
        ("10/year utc+24:00", "at most 23:59"),
        ("10/year utc+2:75", "an offset from UTC"),
        ("10/month tomorrow", "the end of the quota"),
    ] {
        let err = text.parse::<Quota>().unwrap_err().to_string();
        assert!(err.contains(says), "{text}: {err}");
    }
    // A calendar's periods are fixed windows: parsed policies make them so,
    // and asking for another algorithm is refused with a reason.
    let policy = Policy::parse_with("monthly = 50000/month; 100/min", Algorithm::Gcra).unwrap();
    assert_eq!(policy.limits()[0].algorithm(), Algorithm::FixedWindow);
    assert_eq!(policy.limits()[1].algorithm(), Algorithm::Gcra);
    assert_eq!(policy.limits()[0].identity(), "monthly:fixed-window:month");
    let err = Limit::new("m", Algorithm::SlidingWindow, Quota::per_month(5).unwrap()).unwrap_err();
    assert!(
        matches!(err, PolicyError::CalendarNeedsFixedWindow { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("fixed window"), "{err}");
    // A billing day is part of the limit's identity: a change of it starts
    // a new budget, never reads one period's count as another's.
    let billing = Policy::parse_with("monthly = 50000/month from 15", Algorithm::Gcra).unwrap();
    assert_eq!(
        billing.limits()[0].identity(),
        "monthly:fixed-window:month-from-15"
    );
}

/// Months of 28 to 31 days, a billing day, weeks, years and an offset: a
/// period's count holds to its last microsecond and starts afresh at the
/// next period's first, and the retry-after of a denial is the period's
/// real end.
#[test]
fn each_period_ends_where_the_calendar_says() {
    let memory = MemoryBackend::new();
    let cases = [
        ("2/month", "2024-02-10 12:00", "2024-03-01"),
        ("2/month", "2025-02-03 00:00", "2025-03-01"),
        ("2/month", "2025-04-30 23:00", "2025-05-01"),
        ("2/month", "2025-12-31 10:00", "2026-01-01"),
        ("2/month from 15", "2026-11-24 09:00", "2026-12-15"),
        ("2/month from 15", "2026-12-01 00:00", "2026-12-15"),
        ("2/month from 31", "2025-02-01 00:00", "2025-02-28"),
        ("2/month from 31", "2024-02-29 08:00", "2024-03-31"),
        ("2/week", "2026-11-24 09:00", "2026-11-30"),
        ("2/year", "2024-12-31 23:00", "2025-01-01"),
        ("2/month utc+02:00", "2026-11-30 21:00", "2026-11-30 22:00"),
        ("2/month utc-05:00", "2026-12-01 03:00", "2026-12-01 05:00"),
    ];
    for (i, (quota, now, end)) in cases.into_iter().enumerate() {
        let policy: Policy = format!("calendar = {quota}").parse().unwrap();
        let key = Key::new("case", i.to_string());
        let (now, end) = (at(now), at(end));
        assert!(memory.check_at(&key, &policy, 2, now).is_allowed());
        let denied = memory.check_at(&key, &policy, 1, now);
        assert!(!denied.is_allowed(), "{quota} at {now:?}");
        assert_eq!(
            denied.retry_after(),
            Some(Duration::from(Micros::new(end.as_u64() - now.as_u64()))),
            "{quota}"
        );
        let last = Micros::new(end.as_u64() - 1);
        assert!(
            !memory.check_at(&key, &policy, 1, last).is_allowed(),
            "{quota}: its last microsecond"
        );
        assert!(
            memory.check_at(&key, &policy, 2, end).is_allowed(),
            "{quota}: the next period"
        );
    }
}

/// Through the layer, on today's clock: `X-RateLimit-Reset` and the IETF
/// `t` point at the first of next month, not 31 days on.
#[tokio::test]
async fn the_reset_headers_point_at_the_end_of_the_period() {
    let next_month = epoch(&format!(
        "{} +1 month",
        String::from_utf8(
            std::process::Command::new("date")
                .args(["-u", "+%Y-%m-01"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
    ));
    let now = epoch("now");
    for style in [HeaderStyle::Legacy, HeaderStyle::Ietf] {
        let layer =
            RateLimitLayer::new("monthly = 5/month".parse::<Policy>().unwrap()).headers(style);
        let svc = tower::ServiceBuilder::new().layer(layer).service(ok());
        let res = svc.oneshot(request("192.0.2.1:1", &[])).await.unwrap();
        let seconds = match style {
            HeaderStyle::Legacy => {
                let reset: u64 = res.headers()["x-ratelimit-reset"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                reset - now
            }
            _ => {
                let field = res.headers()["ratelimit"].to_str().unwrap().to_owned();
                assert!(field.starts_with(r#""monthly";r=4;t="#), "{field}");
                field.rsplit("t=").next().unwrap().parse().unwrap()
            }
        };
        let expected = next_month - now;
        assert!(
            seconds.abs_diff(expected) <= 2,
            "{style:?}: {seconds} s, expected {expected} s to the 1st"
        );
    }
}
