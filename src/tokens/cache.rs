//! Token counts cached per entry, so a long session is tokenised once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::session::{AgentMessage, Entry};

use super::TokenCounter;

/// Caches the token cost of entries by id and counter.
///
/// Entries are append-only, so an id's content is fixed, with one exception: pruning replaces
/// a tool result's content. The key therefore includes whether the entry is pruned.
pub struct TokenCache {
    counter: Arc<dyn TokenCounter>,
    counts: Mutex<HashMap<(String, String, bool), u64>>,
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

    /// Tokens the entry's message costs in a context (0 for metadata entries).
    pub fn count_entry(&self, entry: &Entry) -> u64 {
        let Some(message) = entry.to_agent_message(true) else {
            return 0;
        };
        let pruned = matches!(&message, AgentMessage::ToolResult(r) if r.pruned_at.is_some());
        if entry.id.is_empty() {
            return self.counter.count_message(&message);
        }
        let key = (self.counter.name().to_owned(), entry.id.clone(), pruned);
        if let Some(&n) = self.lock().get(&key) {
            return n;
        }
        // Counted outside the lock: tokenising a large entry must not block other readers.
        let n = self.counter.count_message(&message);
        self.lock().insert(key, n);
        n
    }

    /// Forgets the count of `id` (after an entry was changed in place).
    pub fn invalidate(&self, id: &str) {
        self.lock().retain(|(_, entry_id, _), _| entry_id != id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String, bool), u64>> {
        // A panic while holding the lock leaves a map of plain numbers, still valid.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}
