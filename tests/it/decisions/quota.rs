//! Quota validation and the human syntax.

use std::time::Duration;

use tower_ratelimit::quota::QuotaError;
use tower_ratelimit::Quota;

#[test]
fn the_documented_forms_parse() {
    let cases = [
        ("10/s", 10, 1),
        ("100/min", 100, 60),
        ("100/m", 100, 60),
        ("1000/hour", 1000, 3600),
        ("1000/h", 1000, 3600),
        ("5000/day", 5000, 86_400),
        ("100/5min", 100, 300),
        (" 7 / 30 seconds ", 7, 30),
    ];
    for (text, limit, secs) in cases {
        let q: Quota = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(
            (q.limit(), q.window()),
            (limit, Duration::from_secs(secs)),
            "{text}"
        );
        assert_eq!(q.burst(), None);
    }
    let q: Quota = "10/s burst 20".parse().unwrap();
    assert_eq!(q.burst(), Some(20));
    assert_eq!(q, Quota::per_second(10).unwrap().with_burst(20).unwrap());
}

#[test]
fn display_round_trips() {
    for text in [
        "10/s",
        "100/min",
        "1000/h",
        "5000/day",
        "100/5min",
        "10/s burst 20",
        "3/250ms",
    ] {
        let q: Quota = text.parse().unwrap();
        assert_eq!(q.to_string(), text);
        assert_eq!(q.to_string().parse::<Quota>().unwrap(), q);
    }
}

#[test]
fn bad_strings_point_at_the_bad_part() {
    let cases = [
        ("", "at its end: expected a limit"),
        ("ten/s", "at \"ten/s\" (byte 0): expected a limit"),
        ("10 s", "at \"s\" (byte 3): expected \"/\""),
        ("10/", "at its end: expected a time unit"),
        (
            "10/fortnight",
            "at \"fortnight\" (byte 3): unknown time unit \"fortnight\"",
        ),
        ("10/s burst", "at its end: expected a burst size"),
        (
            "10/s bust 20",
            "at \"bust 20\" (byte 5): expected \"burst\"",
        ),
        (
            "10/s burst 20 extra",
            "at \"extra\" (byte 14): expected the end",
        ),
        (
            "10/0s",
            "at \"0s\" (byte 3): expected a window longer than zero",
        ),
        ("99999999999/s", "expected a limit of at most 4294967295"),
        (
            "99999999999999999999/s",
            "expected a number that fits in 64 bits",
        ),
        ("1/9999day", "expected a window of at most 366 days"),
    ];
    for (text, expected) in cases {
        let err = text.parse::<Quota>().unwrap_err().to_string();
        assert!(err.contains(expected), "{text:?}: {err}");
        assert!(err.starts_with(&format!("invalid quota {text:?}")), "{err}");
    }
}

#[test]
fn invalid_quotas_are_rejected_with_a_reason() {
    assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroLimit));
    assert_eq!(Quota::new(1, Duration::ZERO), Err(QuotaError::ZeroWindow));
    assert_eq!(
        Quota::per_second(1).unwrap().with_burst(0),
        Err(QuotaError::ZeroBurst)
    );
    assert!(matches!(
        Quota::new(1, Duration::from_nanos(1_000_500)),
        Err(QuotaError::SubMicrosecondWindow(_))
    ));
    // Below 1 ms a window is decided by clocks' jitter, not by its limit.
    let short = "1/1us".parse::<Quota>().unwrap_err();
    assert_eq!(
        short.to_string(),
        "invalid quota: the window 1µs is shorter than the minimum of 1ms (for a high rate, give its limit per second)"
    );
    assert!(matches!(
        Quota::new(1, Duration::from_micros(999)),
        Err(QuotaError::WindowTooShort(_))
    ));
    assert!(Quota::new(1, tower_ratelimit::quota::MIN_WINDOW).is_ok());
    assert!(matches!(
        Quota::new(1, Duration::from_secs(367 * 86_400)),
        Err(QuotaError::WindowTooLong(_))
    ));
    let fine = Quota::per_second(2_000_000).unwrap_err();
    assert_eq!(
        fine.to_string(),
        "invalid quota: 2000000 per 1s is more than one per microsecond"
    );
    // One per day with a burst of a million takes 2,700 years to refill.
    let long = Quota::per_day(1)
        .unwrap()
        .with_burst(1_000_000)
        .unwrap_err();
    assert!(long.to_string().contains("longer than 8.9 years"), "{long}");
    assert!("0/s"
        .parse::<Quota>()
        .unwrap_err()
        .to_string()
        .contains("at least 1"));
    assert!("1/s burst 0"
        .parse::<Quota>()
        .unwrap_err()
        .to_string()
        .contains("burst must be at least 1"));
}

#[test]
fn hostile_text_never_panics() {
    for text in [
        "/",
        "//",
        "1//s",
        "1/s/s",
        "1/\u{0}",
        "١٠/s",
        "10/ß",
        "10/s burst ١",
        "\u{feff}10/s",
    ] {
        assert!(text.parse::<Quota>().is_err(), "{text:?}");
    }
    let long = "9".repeat(100_000) + "/s";
    assert!(long.parse::<Quota>().is_err());
}

#[test]
fn an_unknown_unit_is_answered_with_every_unit_that_parses() {
    let error = "10/fortnight".parse::<Quota>().unwrap_err().to_string();
    // Each unit the message offers is one that parses.
    for offered in ["us", "ms", "s", "min", "h", "day", "week", "month", "year"] {
        assert!(error.contains(offered), "{offered} in {error}");
        // (A window is at least 1 ms.)
        let count = if offered == "us" { "1000" } else { "" };
        let quota = format!("1/{count}{offered}");
        assert!(quota.parse::<Quota>().is_ok(), "{quota}");
    }
    assert!("10/month from 15 utc+02:00".parse::<Quota>().is_ok());
    assert!(error.contains("from 15 utc+02:00"), "{error}");
}
