//! Token counts cached per entry, so a long session is tokenised once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::session::{AgentMessage, Entry, IdKey};

use super::TokenCounter;

/// Caches the token cost of entries by id, for one counter.
///
/// Entries are append-only, so an id's content is fixed, with one exception: pruning replaces
/// a tool result's content. Each id therefore has a count for its unpruned and pruned state.
///
/// A daemon holds one for every entry of an open session, so a slot is small: its id inline
/// (up to 22 bytes), two 32-bit counts, 32 bytes (it was an owned id and two optional 64-bit counts, ~120 bytes
/// with the id's allocation: a third of a huge session's file; issue 35 item 7).
pub struct TokenCache {
    counter: Arc<dyn TokenCounter>,
    /// id -> [unpruned, pruned] counts, [`UNCOUNTED`] where not counted yet.
    counts: Mutex<Counts>,
}

type Counts = HashMap<IdKey, [u32; 2], foldhash::fast::RandomState>;

/// A count slot not counted yet.
const UNCOUNTED: u32 = u32::MAX;

/// `n` in a slot: an entry of 4 billion tokens (16 GB of text) is counted as one just under.
fn slot_count(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(UNCOUNTED - 1).min(UNCOUNTED - 1)
}

impl TokenCache {
    pub fn new(counter: Arc<dyn TokenCounter>) -> Self {
        TokenCache {
            counter,
            counts: Mutex::new(Counts::default()),
        }
    }

    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// Tokens the entry's message costs in a context (0 for metadata entries). A cached count
    /// is returned without converting or cloning the message.
    pub fn count_entry(&self, entry: &Entry) -> u64 {
        // Parsed for the count only, unless it already is: counting a long path must not
        // keep every body parsed (issue 35 item 7).
        let entry = &*entry.peek();
        let pruned = matches!(
            entry.message(),
            Some(AgentMessage::ToolResult(r)) if r.pruned_at.is_some()
        );
        let slot = usize::from(pruned);
        if !entry.id.is_empty()
            && let Some(&counts) = self.lock().get(entry.id.as_bytes())
            && counts[slot] != UNCOUNTED
        {
            return u64::from(counts[slot]);
        }
        let Some(message) = entry.agent_message(true) else {
            return 0;
        };
        // Counted outside the lock: tokenising a large entry must not block other readers.
        let n = self.counter.count_message(&message);
        if !entry.id.is_empty() {
            let mut counts = self.lock();
            counts
                .entry(IdKey::new(&entry.id))
                .or_insert([UNCOUNTED; 2])[slot] = slot_count(n);
        }
        n
    }

    /// Forgets the count of `id` (after an entry was changed in place).
    pub fn invalidate(&self, id: &str) {
        self.lock().remove(id.as_bytes());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // A panic while holding the lock leaves a map of plain numbers, still valid.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}
