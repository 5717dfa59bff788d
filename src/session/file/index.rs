//! The id → entry index of a session: built for every line at open, so its keys are held
//! inline (the ids writers produce are 8 hex digits) and hashed with foldhash instead of
//! SipHash; a key costs no allocation and a lookup a few dozen instructions.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Longest id held inline; longer ones are boxed.
const INLINE: usize = 22;

/// An id as a key, hashed and compared as its bytes (so a `&[u8]` finds it).
#[derive(Clone, Debug)]
enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl Key {
    fn new(id: &str) -> Key {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                Key::Inline { len, bytes }
            }
            _ => Key::Boxed(id.as_bytes().into()),
        }
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Boxed(b) => b,
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Borrow::<[u8]>::borrow(self).hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        match (self, other) {
            // Bytes past `len` are zero, so whole arrays compare: a few vector compares
            // instead of a call to `memcmp`.
            (Key::Inline { len: a, bytes: x }, Key::Inline { len: b, bytes: y }) => {
                a == b && x == y
            }
            _ => Borrow::<[u8]>::borrow(self) == Borrow::<[u8]>::borrow(other),
        }
    }
}

impl Eq for Key {}

/// id → index of the first entry with that id.
#[derive(Debug, Default)]
pub(super) struct IdIndex(HashMap<Key, usize, foldhash::fast::RandomState>);

impl IdIndex {
    pub(super) fn get(&self, id: &str) -> Option<&usize> {
        if id.len() <= INLINE {
            self.0.get(&Key::new(id))
        } else {
            self.0.get(id.as_bytes())
        }
    }

    pub(super) fn contains_key(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// Maps `id` to `at` unless it is already there; returns whether it was added.
    pub(super) fn insert_new(&mut self, id: &str, at: usize) -> bool {
        match self.0.entry(Key::new(id)) {
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
