//! The quota and policy syntax: any text is an error or a value, never a
//! panic, and every quota reads back from its own text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_ratelimit::{Algorithm, Policy, Quota};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(quota) = text.parse::<Quota>() {
        assert_eq!(quota.to_string().parse::<Quota>(), Ok(quota), "{text:?}");
    }
    for algorithm in [Algorithm::SlidingWindow, Algorithm::Gcra] {
        if let Ok(policy) = Policy::parse_with(text, algorithm) {
            for limit in policy.limits() {
                let again = limit.quota().to_string().parse::<Quota>();
                assert_eq!(again, Ok(limit.quota()), "{text:?}");
            }
        }
    }
});
