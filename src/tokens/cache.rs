//! Token counts cached per entry, so a long session is tokenised once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::session::{AgentMessage, Entry};

use super::TokenCounter;

/// Caches the token cost of entries by id, for one counter.
///
/// Entries are append-only, so an id's content is fixed, with one exception: pruning replaces
/// a tool result's content. Each id therefore has a count for its unpruned and pruned state.
pub struct TokenCache {
    counter: Arc<dyn TokenCounter>,
    /// id -> [unpruned, pruned] counts.
    counts: Mutex<HashMap<String, [Option<u64>; 2]>>,
}

impl TokenCache {
    pub fn new(counter: Arc<dyn TokenCounter>) -> Self {
        TokenCache {
            counter,
            counts: Mutex::new(HashMap::new()),
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
            && let Some(n) = self.lock().get(entry.id.as_str()).and_then(|c| c[slot])
        {
            return n;
        }
        let Some(message) = entry.agent_message(true) else {
            return 0;
        };
        // Counted outside the lock: tokenising a large entry must not block other readers.
        let n = self.counter.count_message(&message);
        if !entry.id.is_empty() {
            self.lock().entry(entry.id.clone()).or_default()[slot] = Some(n);
        }
        n
    }

    /// Forgets the count of `id` (after an entry was changed in place).
    pub fn invalidate(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, [Option<u64>; 2]>> {
        // A panic while holding the lock leaves a map of plain numbers, still valid.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}
