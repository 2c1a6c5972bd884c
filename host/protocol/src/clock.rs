//! Wall-clock time as kiln records and shows it (the store, logs, the edit journal): unix
//! milliseconds, their UTC calendar text (through the `time` crate) and ages for a person.

use time::OffsetDateTime;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Unix milliseconds as UTC, `YYYY-MM-DDTHH:MM:SSZ` (a moment outside the calendar the `time`
/// crate covers, ±9999 years, shows as the epoch).
pub fn utc_text(ms: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// A moment for a person: `2026-11-23 11:09:32 UTC, 4 min ago` (`now` in unix ms too).
pub fn human_time(ms: i64, now: i64) -> String {
    let when = utc_text(ms).replace('T', " ").replace('Z', " UTC");
    let ago = (now - ms) / 1000;
    let age = match ago {
        i64::MIN..=-1 => return when,
        0..=59 => format!("{ago} s ago"),
        60..=3599 => format!("{} min ago", ago / 60),
        3600..=86_399 => format!("{} h {} min ago", ago / 3600, ago / 60 % 60),
        _ => format!("{} days ago", ago / 86_400),
    };
    format!("{when}, {age}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_as_dates_and_ages() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_795_778_972_000), "2026-11-27T11:29:32Z");
        assert_eq!(utc_text(-1), "1969-12-31T23:59:59Z");
        let t = 1_795_778_972_000;
        assert_eq!(
            human_time(t, t + 125_000),
            "2026-11-27 11:29:32 UTC, 2 min ago"
        );
        assert_eq!(human_time(t, t + 5_000), "2026-11-27 11:29:32 UTC, 5 s ago");
        assert_eq!(
            human_time(t, t + 3 * 86_400_000),
            "2026-11-27 11:29:32 UTC, 3 days ago"
        );
        assert_eq!(human_time(t, t - 1000), "2026-11-27 11:29:32 UTC");
    }
}
