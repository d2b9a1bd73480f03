//! The one way sizes and durations are written to ephem: command-line flags, `ephem serve`'s
//! query parameters and its configuration file all parse them here, so that `2MiB` means the
//! same everywhere and a refusal always lists what is accepted.

use std::time::Duration;

/// What [`parse_size`] accepts, for error messages.
pub const SIZE_FORMS: &str = "a number of bytes (65536) or a number with a binary unit: \
     k or KiB, m or MiB, g or GiB (64KiB, 2MiB, 1g); case is ignored";

/// What [`parse_duration`] accepts, for error messages.
pub const DURATION_FORMS: &str = "a number with a unit: us, ms, s, m or h (250ms, 2s, 1.5m), \
     or a plain number of seconds";

/// A size in bytes: `65536`, `64k`, `64KiB`, `2m`, `2MiB`, `1g`, `1GiB` (units are binary;
/// case is ignored; a `b` after the number alone means bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("bad size `{s}`: expected {SIZE_FORMS}");
    let lower = s.trim().to_ascii_lowercase();
    let (digits, unit) = [
        ("kib", 1u64 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
        ("b", 1),
    ]
    .into_iter()
    .find_map(|(suffix, unit)| lower.strip_suffix(suffix).map(|d| (d, unit)))
    .unwrap_or((lower.as_str(), 1));
    let digits = digits.trim_end();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(unit).ok_or_else(bad)
}

/// As [`parse_size`], as a `usize` (sizes of things in this process's memory).
pub fn parse_size_usize(s: &str) -> Result<usize, String> {
    usize::try_from(parse_size(s)?).map_err(|_| format!("size `{s}` is too large"))
}

/// As [`parse_size_usize`], for sizes of things that must hold something (not 0).
pub fn parse_nonzero_size(s: &str) -> Result<usize, String> {
    match parse_size_usize(s)? {
        0 => Err(format!("`{s}`: must be more than 0")),
        n => Ok(n),
    }
}

/// A duration: `250ms`, `2s`, `1.5m`, `1h`, `100us`, or a plain number of seconds; more than
/// zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration `{s}`: expected {DURATION_FORMS}, more than zero");
    let t = s.trim();
    let (number, unit) = [
        ("us", 1e-6),
        ("ms", 1e-3),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3600.0),
    ]
    .into_iter()
    .find_map(|(suffix, unit)| t.strip_suffix(suffix).map(|n| (n, unit)))
    .unwrap_or((t, 1.0));
    // Only plain decimal numbers: `f64`'s parser also takes `inf`, `nan` and exponents.
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    let seconds = number
        .parse::<f64>()
        .ok()
        .map(|n| n * unit)
        .filter(|&n| n > 0.0 && n.is_finite())
        .ok_or_else(bad)?;
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_every_accepted_form() {
        for (text, bytes) in [
            ("65536", 65536),
            ("0", 0),
            ("64k", 64 << 10),
            ("64K", 64 << 10),
            ("64KiB", 64 << 10),
            ("64kib", 64 << 10),
            ("2m", 2 << 20),
            ("2MiB", 2 << 20),
            ("1g", 1 << 30),
            ("1GiB", 1 << 30),
            ("512b", 512),
            (" 3 MiB ", 3 << 20),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn bad_sizes_are_refused_with_the_accepted_forms() {
        for text in [
            "",
            "k",
            "-1",
            "1.5m",
            "2MB",
            "2 M B",
            "1t",
            "0x10",
            "99999999999999999999g",
        ] {
            let e = parse_size(text).unwrap_err();
            assert!(e.contains(SIZE_FORMS), "{text}: {e}");
        }
        assert!(parse_nonzero_size("0").is_err());
        assert_eq!(parse_nonzero_size("1k"), Ok(1024));
    }

    #[test]
    fn durations_in_every_accepted_form() {
        for (text, d) in [
            ("250ms", Duration::from_millis(250)),
            ("2s", Duration::from_secs(2)),
            ("1.5", Duration::from_millis(1500)),
            ("1m", Duration::from_secs(60)),
            ("1.5m", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
            ("100us", Duration::from_micros(100)),
        ] {
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
    }

    #[test]
    fn bad_durations_are_refused_with_the_accepted_forms() {
        for text in [
            "",
            "0",
            "0s",
            "-1s",
            "inf",
            "nan",
            "1e3",
            "2 weeks",
            "ms",
            "1d",
            "0.0000000001s",
        ] {
            let e = parse_duration(text).unwrap_err();
            assert!(e.contains(DURATION_FORMS), "{text}: {e}");
        }
    }
}
