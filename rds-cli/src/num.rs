//! Numbers on the tools' command lines, with one rule each:
//! - a size or count ([`parse_size`]): `strtoull(s, &end, 0)` syntax (decimal, `0x` hex,
//!   `0` octal) with at least one digit, then at most one k/m/g suffix (times 1024, 1024²,
//!   1024³), and nothing else; a sign `-`, a value over `u64::MAX` and any other trailing
//!   character are refused;
//! - seconds ([`parse_seconds`]): a decimal number as `strtod` reads it (fraction and exponent
//!   allowed), then an optional `s` (seconds), `m` (minutes), `ms`/`msec` or `us`/`usec`
//!   suffix, from 0 to 10⁹ seconds; [`DURATION_SYNTAX`] says so in an error message.
//!
//! Leading white space (as C's `isspace`) is skipped; trailing white space is refused.

use std::time::Duration;

/// C's `isspace` in the C locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0b}' | '\u{0c}' | '\r')
}

/// A size or count with an optional k/m/g suffix (see the module documentation); `None`
/// when `s` is not one. The caller words the error and applies its own maximum.
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim_start_matches(is_c_space);
    let t = match t.as_bytes().first() {
        Some(b'-') => return None,
        Some(b'+') => &t[1..],
        _ => t,
    };
    let (radix, digits) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => (16, hex),
        // The leading 0 of an octal number is one of its digits ("0" and "0k" are 0).
        None if t.starts_with('0') => (8, t),
        None => (10, t),
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let (num, rest) = digits.split_at(end);
    if num.is_empty() {
        return None;
    }
    let v = u64::from_str_radix(num, radix).ok()?;
    let shift = match rest {
        "" => 0,
        "k" | "K" => 10,
        "m" | "M" => 20,
        "g" | "G" => 30,
        _ => return None,
    };
    v.checked_mul(1u64 << shift)
}

/// The duration syntax in words, for the tools' error messages.
pub const DURATION_SYNTAX: &str = "seconds, or a number with ms, s or m";

/// Why a text is not a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecondsError {
    /// No number, or something after it other than a known suffix.
    NotANumber,
    /// A number below 0 or above 10⁹ seconds.
    OutOfRange,
}

/// Seconds with an optional `s`/`m`/`ms`/`msec`/`us`/`usec` suffix (see the module documentation).
/// Zero is a valid duration; a caller that needs a positive one checks it.
///
/// # Errors
/// [`SecondsError`].
pub fn parse_seconds(s: &str) -> Result<Duration, SecondsError> {
    let t = s.trim_start_matches(is_c_space);
    let end = float_prefix(t);
    let v: f64 = t[..end].parse().map_err(|_| SecondsError::NotANumber)?;
    let scale = match &t[end..] {
        "" | "s" => 1.0,
        "m" => 60.0,
        "ms" | "msec" => 1e-3,
        "us" | "usec" => 1e-6,
        _ => return Err(SecondsError::NotANumber),
    };
    let secs = v * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(SecondsError::OutOfRange);
    }
    // -0.0 is in range; it is zero seconds.
    Ok(Duration::from_secs_f64(secs.abs()))
}

/// [`parse_seconds`] for a clap `value_parser`: the error says what a duration is (clap
/// prefixes the option's name).
///
/// # Errors
/// The text to show after clap's "invalid value" prefix.
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_seconds(s).map_err(|e| match e {
        SecondsError::NotANumber => format!("'{s}' is not a duration ({DURATION_SYNTAX})"),
        SecondsError::OutOfRange => format!("'{s}' is out of range (0 to 1e9 seconds)"),
    })
}

/// [`parse_size`] for a clap `value_parser`, from `min` to `max`: the error names the syntax
/// and the range (clap prefixes the option's name).
///
/// # Errors
/// The text to show after clap's "invalid value" prefix.
pub fn size_arg(s: &str, min: u64, max: u64) -> Result<u64, String> {
    parse_size(s)
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| {
            format!("'{s}' is not a number from {min} to {max} (k, m or g suffixes allowed)")
        })
}

/// Length of the longest prefix of `t` that is a decimal floating-point number.
fn float_prefix(t: &str) -> usize {
    let b = t.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut digits = i - int_start;
    if i < b.len() && b[i] == b'.' {
        let f = i + 1;
        let mut j = f;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        digits += j - f;
        i = j;
    }
    if digits == 0 {
        return 0;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let e = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > e {
            i = j;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_strtoull_with_suffixes() {
        assert_eq!(parse_size("10"), Some(10));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("+5"), Some(5));
        assert_eq!(parse_size(" 7"), Some(7));
        assert_eq!(parse_size("0x10"), Some(16));
        assert_eq!(parse_size("0X3e"), Some(62));
        assert_eq!(parse_size("010"), Some(8));
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("0k"), Some(0));
        assert_eq!(parse_size("2k"), Some(2048));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("0x1g"), Some(1 << 30));
        assert_eq!(parse_size("18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn sizes_refused() {
        for bad in [
            "",
            " ",
            "k",
            "+",
            "5x",
            "12x",
            "5kk",
            "4kb",
            "1kb",
            "08",
            "0x",
            "0xk",
            "-1",
            "-0",
            "-3",
            "7 ",
            "abc",
            "\u{a0}7",
            "18446744073709551616",
            "99999999999999999999",
            "99999999999999999999999",
            "0x40000000000000k",
            "17179869184g",
        ] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn seconds_with_suffixes() {
        let ok = |s: &str| parse_seconds(s).unwrap();
        assert_eq!(ok("2"), Duration::from_secs(2));
        assert_eq!(ok("0.5"), Duration::from_millis(500));
        assert_eq!(ok("1.5"), Duration::from_millis(1500));
        assert_eq!(ok(".5"), Duration::from_millis(500));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("250msec"), Duration::from_millis(250));
        assert_eq!(ok("100us"), Duration::from_micros(100));
        assert_eq!(ok("100usec"), Duration::from_micros(100));
        assert_eq!(ok("1e-3"), Duration::from_millis(1));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("1s"), Duration::from_secs(1));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("0.5m"), Duration::from_secs(30));
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("1e9"), Duration::from_secs(1_000_000_000));
    }

    #[test]
    fn size_arg_messages() {
        assert_eq!(size_arg("2k", 1, 4096), Ok(2048));
        assert_eq!(
            size_arg("0", 1, 9).unwrap_err(),
            "'0' is not a number from 1 to 9 (k, m or g suffixes allowed)"
        );
    }

    #[test]
    fn duration_arg_messages() {
        assert_eq!(duration_arg("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(
            duration_arg("soon").unwrap_err(),
            "'soon' is not a duration (seconds, or a number with ms, s or m)"
        );
        assert_eq!(
            duration_arg("-1").unwrap_err(),
            "'-1' is out of range (0 to 1e9 seconds)"
        );
    }

    #[test]
    fn seconds_refused() {
        use SecondsError::*;
        for (s, why) in [
            ("1x", NotANumber),
            ("1h", NotANumber),
            ("1mm", NotANumber),
            ("2sec", NotANumber),
            ("abc", NotANumber),
            ("soon", NotANumber),
            ("x", NotANumber),
            ("", NotANumber),
            ("nan", NotANumber),
            ("inf", NotANumber),
            ("1 ", NotANumber),
            ("-1", OutOfRange),
            ("-0.5ms", OutOfRange),
            ("1e10", OutOfRange),
            ("1e400", OutOfRange),
        ] {
            assert_eq!(parse_seconds(s), Err(why), "{s:?}");
        }
    }
}
