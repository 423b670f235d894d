//! Human durations for `--grace`: `300ms`, `2s`, `1.5s`, `1m`, or bare seconds.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {0:?}: use a number with ms, s or m (e.g. 300ms, 2s)")]
pub struct DurationError(pub String);

/// Longest grace we accept: a day. Anything longer is almost certainly a typo.
const MAX: Duration = Duration::from_secs(86_400);

pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(text.to_owned());
    let t = text.trim();
    let (number, scale_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        (t, 1_000.0)
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(err());
    }
    let value: f64 = number.parse().map_err(|_| err())?;
    let ms = value * scale_ms;
    if !ms.is_finite() || ms < 0.0 || ms > MAX.as_millis() as f64 {
        return Err(err());
    }
    Ok(Duration::from_micros((ms * 1_000.0).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejected_forms() {
        for bad in [
            "",
            "s",
            "-1s",
            "1h",
            "abc",
            "1e3s",
            "2 s x",
            "1.2.3s",
            "99999999m",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in ".*") {
            let _ = parse_duration(&s);
        }
    }
}
