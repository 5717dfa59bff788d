//! Identifiers and timestamps for session files: session ids (16-hex snowflakes), entry ids
//! (8 hex), and the ISO-8601 UTC timestamps the format uses, without a date-time crate.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// 64 unpredictable-enough bits: std's randomly keyed SipHash over a counter, the time and the
/// process id. Ids only need to be unlikely to collide (callers check and retry), not secret.
pub(crate) fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(now_nanos());
    h.write_u32(std::process::id());
    h.finish()
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    i64::try_from(now_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// A session id: 16 lowercase hex digits, the millisecond time shifted left by 22 bits plus a
/// 22-bit sequence (spec §1.1). The sequence starts at a random value per process so two
/// processes creating sessions in the same millisecond still differ.
pub fn new_session_id() -> String {
    static START: OnceLock<u64> = OnceLock::new();
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(random_u64);
    let seq = start.wrapping_add(SEQ.fetch_add(1, Ordering::Relaxed)) & 0x3f_ffff;
    let ms = u64::try_from(now_ms()).unwrap_or(0);
    format!("{:016x}", (ms << 22) | seq)
}

/// A fresh 8-hex entry id not accepted by `taken`: random, retried up to 100 times, then a
/// 16-hex snowflake (as the reference does).
pub fn new_entry_id(taken: impl Fn(&str) -> bool) -> String {
    for _ in 0..100 {
        let id = format!("{:08x}", random_u64() as u32);
        if !taken(&id) {
            return id;
        }
    }
    loop {
        let id = new_session_id();
        if !taken(&id) {
            return id;
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a millisecond Unix time.
pub fn iso_from_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// The current time as ISO-8601 UTC with milliseconds.
pub fn now_iso() -> String {
    iso_from_ms(now_ms())
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff][Z|±HH:MM]` into milliseconds since the epoch, as
/// JavaScript's `Date.parse` does for the timestamps session files contain. `None` otherwise.
pub fn ms_from_iso(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = s.get(start..i)?;
        if frac.is_empty() {
            return None;
        }
        let padded: String = frac.chars().chain("000".chars()).take(3).collect();
        millis = padded.parse::<i64>().ok()?;
    }
    let offset_min = match &s[i..] {
        "Z" | "z" => 0,
        "" => 0,
        rest if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (oh * 60 + om)
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + millis)
}

// Howard Hinnant's civil-date algorithms (public domain), proleptic Gregorian calendar.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(iso_from_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_from_ms(1_763_681_581_544), "2025-11-20T23:33:01.544Z");
        assert_eq!(iso_from_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_from_ms(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_what_files_contain() {
        assert_eq!(
            ms_from_iso("2025-11-20T23:33:01.544Z"),
            Some(1_763_681_581_544)
        );
        assert_eq!(ms_from_iso("2025-01-01T00:00:00Z"), Some(1_735_689_600_000));
        assert_eq!(
            ms_from_iso("2025-01-01T01:00:00.5+01:00"),
            Some(1_735_689_600_500)
        );
        assert_eq!(ms_from_iso("yesterday"), None);
        assert_eq!(ms_from_iso("2025-13-01T00:00:00Z"), None);
        assert_eq!(ms_from_iso("2025-01-01T00:00:00Q"), None);
    }

    #[test]
    fn ids_have_the_reference_shape() {
        let s = new_session_id();
        assert_eq!(s.len(), 16);
        assert!(s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        assert_ne!(new_session_id(), new_session_id());
        let e = new_entry_id(|_| false);
        assert_eq!(e.len(), 8);
        assert!(e.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        // Every 8-hex id taken: the fallback is a 16-hex snowflake.
        assert_eq!(new_entry_id(|id| id.len() == 8).len(), 16);
    }

    proptest! {
        #[test]
        fn format_and_parse_agree(ms in -62_135_596_800_000i64..253_402_300_799_999i64) {
            prop_assert_eq!(ms_from_iso(&iso_from_ms(ms)), Some(ms));
        }
    }
}
