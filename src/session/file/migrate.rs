//! Versions 1 and 2 to version 3, in memory (spec §1.5); the first write rewrites the file.

use std::collections::HashSet;

use serde_json::Value;

use crate::session::entry::{CURRENT_SESSION_VERSION, Entry, EntryKind, SessionHeader};

/// An 8-hex-digit id from `line` and its number (FNV-1a, 64 bits), salted again on a
/// collision with an id already `taken`: deterministic for the same file.
fn derived_id(line: &str, number: usize, taken: &HashSet<String>) -> String {
    let mut salt = 0u64;
    loop {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        eat(&(number as u64).to_le_bytes());
        eat(&salt.to_le_bytes());
        eat(line.as_bytes());
        let id = format!("{:08x}", (hash >> 32) ^ (hash & 0xffff_ffff));
        if !taken.contains(&id) {
            return id;
        }
        salt += 1;
    }
}

/// Migrates entries of a version 1 or 2 file to version 3 in place (spec §1.5). Returns the
/// version migrated from, `None` when the file is already current.
pub(super) fn migrate(
    header: &mut SessionHeader,
    entries: &mut [Entry],
    lines: &[usize],
) -> Option<u64> {
    let from = header.version.unwrap_or(1);
    if from >= CURRENT_SESSION_VERSION {
        return None;
    }
    if from < 2 {
        migrate_v1_ids(entries, lines);
    }
    for entry in entries.iter_mut() {
        // Known `hookMessage`s already parse as `custom`; this catches ones kept as unknown.
        let (kind, extra) = entry.parts_mut();
        if let EntryKind::Unknown { type_name } = kind
            && type_name == "message"
            && let Some(Value::Object(msg)) = extra.get_mut("message")
            && msg.get("role").and_then(Value::as_str) == Some("hookMessage")
        {
            msg.insert("role".into(), Value::from("custom"));
        }
    }
    header.version = Some(CURRENT_SESSION_VERSION);
    Some(from)
}

/// v1 → v2: new ids, a linear chain in file order, `firstKeptEntryIndex` (an index into the
/// parsed lines *including the header*) → `firstKeptEntryId`.
///
/// The ids are derived from each migrated line and its line number (DESIGN §3 #13), not drawn
/// at random as the reference does: every reader of the same bytes (a second handle, another
/// process, a copy of the file) sees the same ids, and they stay the same when the first write
/// rewrites the file as version 3.
pub(super) fn migrate_v1_ids(entries: &mut [Entry], lines: &[usize]) {
    let mut taken = HashSet::new();
    let new_ids: Vec<String> = entries
        .iter()
        .zip(lines)
        .map(|(entry, line)| {
            let id = derived_id(&entry.to_line(), *line, &taken);
            taken.insert(id.clone());
            id
        })
        .collect();
    let mut previous: Option<String> = None;
    for (i, entry) in entries.iter_mut().enumerate() {
        entry.id = new_ids[i].clone();
        entry.parent_id = previous.replace(new_ids[i].clone());
        if entry.type_name() != "compaction" {
            continue;
        }
        // A parsed compaction keeps unknown fields in its own `extra`; one kept as unknown
        // (wrong shape) has them in the entry's.
        let (kind, entry_extra) = entry.parts_mut();
        let (extra, kept_id) = match kind {
            EntryKind::Compaction(c) => (&mut c.extra, Some(&mut c.first_kept_entry_id)),
            _ => (entry_extra, None),
        };
        let Some(index) = extra.get("firstKeptEntryIndex").and_then(Value::as_u64) else {
            continue;
        };
        let Some(kept) = usize::try_from(index)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| new_ids.get(i))
        else {
            // Out of range: keep the old field rather than lose it.
            continue;
        };
        extra.remove("firstKeptEntryIndex");
        match kept_id {
            Some(id) => *id = kept.clone(),
            None => {
                extra.insert("firstKeptEntryId".into(), Value::from(kept.clone()));
            }
        }
    }
    // A line kept as written (its body does not parse) takes its new ids into its text.
    for entry in entries.iter_mut() {
        entry.rehead_unparsed();
    }
}
