//! Durations as people write them in configuration: `500ms`, `30s`, `1.5s`, `5m`, `1h`,
//! or a bare number of seconds. One reader for the command line and for
//! [`LockOptions`](crate::LockOptions) read through serde.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// Reads a duration written as `500ms`, `30s`, `1.5s`, `5m`, `1h` or a bare number of
/// seconds (`7`). An [`ErrorKind::Configuration`] error that says what is accepted
/// otherwise.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::parse_duration;
///
/// assert_eq!(parse_duration("1500ms")?, Duration::from_millis(1500));
/// assert_eq!(parse_duration("1.5s")?, Duration::from_millis(1500));
/// assert!(parse_duration("soon").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = |why: String| Err(Error::new(ErrorKind::Configuration, why));
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let nanos_per: u128 = match unit.trim() {
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        other => {
            return bad(format!(
                "{other:?} is not a unit: use ms, s, m or h (500ms, 30s, 5m, 1h)"
            ))
        }
    };
    let not_a_duration = || bad(format!("{text:?} is not a duration (500ms, 30s, 5m, 1h)"));
    // Counted in whole nanoseconds from the digits, so that `0.1s` is 100 ms exactly.
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits(whole) || !digits(fraction) {
        return not_a_duration();
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        match whole.parse() {
            Ok(n) => n,
            Err(_) => return not_a_duration(),
        }
    };
    let mut nanos = whole.checked_mul(nanos_per);
    let mut scale = nanos_per;
    for digit in fraction.bytes() {
        // Digits below a nanosecond count for nothing.
        scale /= 10;
        nanos = nanos.and_then(|n| n.checked_add(u128::from(digit - b'0') * scale));
    }
    let counted = nanos.and_then(|n| {
        let secs = u64::try_from(n / 1_000_000_000).ok()?;
        Some(Duration::new(secs, u32::try_from(n % 1_000_000_000).ok()?))
    });
    match counted {
        Some(duration) => Ok(duration),
        None => bad(format!("{text:?} is too long a duration to count")),
    }
}

/// Writes a duration so that [`parse_duration`] reads it back exactly, in the largest
/// unit that divides it (`30s`, `1500ms`, `5m`); below a millisecond, in fractional
/// milliseconds.
pub fn format_duration(duration: Duration) -> String {
    const MS: u128 = 1_000_000;
    let nanos = duration.as_nanos();
    for (unit, size) in [
        ("h", 3600 * 1000 * MS),
        ("m", 60 * 1000 * MS),
        ("s", 1000 * MS),
    ] {
        if nanos > 0 && nanos.is_multiple_of(size) {
            return format!("{}{unit}", nanos / size);
        }
    }
    if nanos.is_multiple_of(MS) {
        return format!("{}ms", nanos / MS);
    }
    let fraction = format!("{:06}", nanos % MS);
    format!("{}.{}ms", nanos / MS, fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written() {
        for (text, duration) in [
            ("500ms", Duration::from_millis(500)),
            ("30s", Duration::from_secs(30)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.1s", Duration::from_millis(100)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("7", Duration::from_secs(7)),
            (" 2 s ", Duration::from_secs(2)),
        ] {
            assert_eq!(parse_duration(text).ok(), Some(duration), "{text:?}");
        }
        for bad in ["", "soon", "5 minutes", "-1s", "1e9999s", "1.2.3s", "ms"] {
            let err = parse_duration(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad:?}");
        }
    }

    #[test]
    fn a_written_duration_reads_back_exactly() {
        for duration in [
            Duration::ZERO,
            Duration::from_millis(1),
            Duration::from_millis(1500),
            Duration::from_secs(30),
            Duration::from_secs(90),
            Duration::from_secs(7200),
            Duration::from_micros(250),
            Duration::from_nanos(1_000_001),
        ] {
            let text = format_duration(duration);
            assert_eq!(parse_duration(&text).ok(), Some(duration), "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    }
}
