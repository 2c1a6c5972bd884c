//! Retry policy: which failures are worth another attempt, and how long to wait (exponential
//! backoff with jitter, or what the server asked for in `retry-after-ms` / `retry-after`).
//!
//! Kept rather than `backon` (issue #32). Its `adjust` hook could take the server's delay
//! and `notify` could announce a retry, but `Client::complete` keeps two retry budgets (the
//! request's, `max_retries`, spent only while nothing reached the caller; a broken stream's,
//! `stream_max_retries`, even after text did, with its own attempt count for the backoff),
//! and a backon builder counts one: both counts and the "text was shown" flag would live in
//! state shared by the closures around it, for a backoff that is the three functions below.

use std::time::Duration;

/// Is this HTTP status retryable (408, 409, 429, 5xx, Anthropic's 529)?
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// The delay the server asked for: `retry-after-ms` (milliseconds) first, then `retry-after`
/// (seconds). HTTP-date values are ignored (backoff applies).
pub fn server_delay(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms >= 0.0
    {
        return Some(Duration::from_millis(ms as u64));
    }
    if let Some(s) = get("retry-after").and_then(|v| v.parse::<f64>().ok())
        && s >= 0.0
    {
        return Some(Duration::from_millis((s * 1000.0) as u64));
    }
    None
}

/// Exponential backoff with ±25% jitter: `base * 2^attempt`, capped at `cap`.
pub fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.min(16));
    let d = exp.min(cap);
    let jitter = fastrand::f64() * 0.5 - 0.25; // -0.25 .. +0.25
    d.mul_f64(1.0 + jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_headers() {
        for s in [408, 409, 429, 500, 502, 503, 529] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!retryable_status(s), "{s}");
        }
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(server_delay(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(server_delay(&h), Some(Duration::from_millis(150)));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Duration::from_millis(100);
        let cap = Duration::from_secs(1);
        let d0 = backoff(0, b, cap);
        assert!(d0 >= Duration::from_millis(75) && d0 <= Duration::from_millis(125));
        let d3 = backoff(3, b, cap);
        assert!(
            d3 >= Duration::from_millis(600) && d3 <= Duration::from_millis(1000),
            "{d3:?}"
        );
        assert!(backoff(20, b, cap) <= Duration::from_millis(1250));
    }
}
