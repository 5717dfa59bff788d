//! Identifiers and timestamps for session files: session ids (16-hex snowflakes), entry ids
//! (8 hex), and the ISO-8601 UTC timestamps the format uses, without a date-time crate.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest id held inline; longer ones are boxed.
pub(crate) const INLINE: usize = 22;

/// An entry id as a map key, hashed and compared as its bytes (so a `&[u8]` finds it): held
/// inline up to [`INLINE`] bytes (the ids writers produce are 8 hex digits), so a key costs no
/// allocation. For maps with a key per entry of a session of a million entries.
#[derive(Clone, Debug)]
pub struct IdKey(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl IdKey {
    pub fn new(id: &str) -> IdKey {
        IdKey(match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                Repr::Inline { len, bytes }
            }
            _ => Repr::Boxed(id.as_bytes().into()),
        })
    }
}

impl Borrow<[u8]> for IdKey {
    fn borrow(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Boxed(b) => b,
        }
    }
}

impl Hash for IdKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Borrow::<[u8]>::borrow(self).hash(state);
    }
}

impl PartialEq for IdKey {
    fn eq(&self, other: &IdKey) -> bool {
        match (&self.0, &other.0) {
            // Bytes past `len` are zero, so whole arrays compare: a few vector compares
            // instead of a call to `memcmp`.
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => {
                a == b && x == y
            }
            _ => Borrow::<[u8]>::borrow(self) == Borrow::<[u8]>::borrow(other),
        }
    }
}

impl Eq for IdKey {}

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

/// Milliseconds since the Unix epoch of an ISO-8601 date-time, the one parser of timestamps in
/// compactd (entries, messages, retry dates). It accepts what JavaScript's `Date.parse` accepts
/// of the ISO format, since the reference writes and reads timestamps with it:
/// `YYYY-MM-DD`, optionally followed by `T` (or `t`, or a space) and `HH:MM[:SS[.f…]]`, then an
/// optional zone `Z`, `z`, `±HH:MM` or `±HHMM`. Fractions are cut to milliseconds. `24:00:00`
/// is the next midnight; any other hour over 23, a minute or second over 59, a day the month
/// does not have, or anything else is `None` (V8 rolls `02-30` into March; a timestamp that
/// names no real day is not trusted here). A time without a zone is read as UTC (JavaScript
/// would use the machine's zone; a daemon's answer should not depend on where it runs).
pub fn ms_from_iso(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |at: usize, n: usize| -> Option<i64> {
        let part = b.get(at..at + n)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0i64, |acc, &c| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (y, mo, d) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return None;
    }
    let mut i = 10;
    let (mut h, mut mi, mut sec, mut millis) = (0, 0, 0, 0);
    if i < b.len() {
        if !matches!(b[i], b'T' | b't' | b' ') || b.get(i + 3) != Some(&b':') {
            return None;
        }
        h = digits(i + 1, 2)?;
        mi = digits(i + 4, 2)?;
        i += 6;
        if b.get(i) == Some(&b':') {
            sec = digits(i + 1, 2)?;
            i += 3;
            if b.get(i) == Some(&b'.') {
                let frac = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                if frac == 0 {
                    return None;
                }
                millis = b[i + 1..i + 1 + frac.min(3)]
                    .iter()
                    .chain(b"00")
                    .take(3)
                    .fold(0i64, |acc, &c| acc * 10 + i64::from(c - b'0'));
                i += 1 + frac;
            }
        }
        let end_of_day = h == 24 && mi == 0 && sec == 0 && millis == 0;
        if (h > 23 && !end_of_day) || mi > 59 || sec > 59 {
            return None;
        }
    }
    let offset_min = match b.get(i..)? {
        [] | [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), rest @ ..] => {
            let oh = digits(i + 1, 2)?;
            let om = match rest.len() {
                5 if rest[2] == b':' => digits(i + 4, 2)?,
                4 => digits(i + 3, 2)?,
                _ => return None,
            };
            if oh > 23 || om > 59 {
                return None;
            }
            if *sign == b'-' {
                -(oh * 60 + om)
            } else {
                oh * 60 + om
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + millis)
}

/// The number of days in a month of the proleptic Gregorian calendar.
fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil-date algorithms (public domain), proleptic Gregorian calendar.
/// Days since 1970-01-01 of a date (months and days 1-based).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
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

    /// Each input with what `Date.parse` returns for it in Node 20 (`None` for `NaN`), except
    /// a time without a zone, which JavaScript reads in the machine's zone and compactd in UTC,
    /// and a day the month does not have, which V8's fallback parser rolls into the next month.
    /// The two parsers this one replaced disagreed on the first three.
    #[test]
    fn parses_like_javascript_date_parse() {
        let midnight = Some(1_735_689_600_000);
        for (input, expected) in [
            ("2025-01-01T02:00:00+02:00", midnight),
            ("2025-01-01T00:00:00z", midnight),
            ("2025-01-01T25:00:00Z", None),
            ("2024-12-31T22:00:00-02:00", midnight),
            ("2025-01-01T00:00:00+0200", Some(1_735_682_400_000)),
            ("2025-01-01T00:00:00+23:59", Some(1_735_603_260_000)),
            ("2025-01-01T00:00:00+24:00", None),
            ("2025-01-01T24:00:00Z", Some(1_735_776_000_000)),
            ("2025-01-01T24:00:01Z", None),
            ("2025-01-01T00:60:00Z", None),
            ("2025-01-01T00:00:60Z", None),
            ("2025-01-01t00:00:00Z", midnight),
            ("2025-01-01 00:00:00Z", midnight),
            ("2025-01-01T00:00Z", midnight),
            ("2025-01-01", midnight),
            ("2025-01-01T00:00:00", midnight),
            ("2025-01-01T00:00:00.1234567Z", Some(1_735_689_600_123)),
            ("2025-01-01T00:00:00.1Z", Some(1_735_689_600_100)),
            ("2025-01-01T00:00:00.Z", None),
            ("2024-02-29T00:00:00Z", Some(1_709_164_800_000)),
            ("2023-02-29T00:00:00Z", None),
            ("2025-04-31T00:00:00Z", None),
            ("2025-01-01T00:00:00Zjunk", None),
            ("2025-01-01T00:00:00+02", None),
            ("2025-1-01T00:00:00Z", None),
            ("", None),
        ] {
            assert_eq!(ms_from_iso(input), expected, "{input:?}");
        }
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
