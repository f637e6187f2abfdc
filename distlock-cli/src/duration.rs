//! Durations on the command line: `500ms`, `30s`, `1.5s`, `5m`, `1h`, or a number of
//! seconds.

use std::time::Duration;

/// Parses a duration; the error says what is accepted.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "{other:?} is not a unit: use ms, s, m or h (500ms, 30s, 5m, 1h)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (500ms, 30s, 5m, 1h)"))?;
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("{text:?} is not a duration this tool can count"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bad_input() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        for bad in ["", "s", "1d", "-1s", "1..2s", "1e400s", "ms5"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
