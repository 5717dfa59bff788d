//! The id → entry index of a session: built for every line at open, so its keys are held
//! inline ([`IdKey`]) and hashed with foldhash instead of SipHash; a key costs no allocation
//! and a lookup a few dozen instructions.

use std::collections::HashMap;

use crate::session::ids::{INLINE, IdKey};

/// id → index of the first entry with that id.
#[derive(Debug, Default)]
pub(super) struct IdIndex(HashMap<IdKey, usize, foldhash::fast::RandomState>);

impl IdIndex {
    pub(super) fn get(&self, id: &str) -> Option<&usize> {
        if id.len() <= INLINE {
            self.0.get(&IdKey::new(id))
        } else {
            self.0.get(id.as_bytes())
        }
    }

    pub(super) fn contains_key(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// Maps `id` to `at` unless it is already there; returns whether it was added.
    pub(super) fn insert_new(&mut self, id: &str, at: usize) -> bool {
        match self.0.entry(IdKey::new(id)) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(at);
                true
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    pub(super) fn reserve(&mut self, more: usize) {
        self.0.reserve(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_ids_are_found_and_the_first_one_wins() {
        let long = "0123456789abcdef0123456789abcdef-long-uuid-like";
        let mut index = IdIndex::default();
        assert!(index.insert_new("be5f9d09", 0));
        assert!(index.insert_new(long, 1));
        assert!(index.insert_new("", 2));
        assert!(!index.insert_new("be5f9d09", 3));
        assert_eq!(index.get("be5f9d09"), Some(&0));
        assert_eq!(index.get(long), Some(&1));
        assert_eq!(index.get(""), Some(&2));
        assert!(!index.contains_key("be5f9d0"));
        assert!(!index.contains_key(&long[..INLINE]));
        index.clear();
        assert_eq!(index.get("be5f9d09"), None);
    }
}
