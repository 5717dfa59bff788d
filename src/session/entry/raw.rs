//! The raw line of an entry loaded from a current file: kept as a span of the file buffer,
//! its header fields parsed at once, its body parsed on first use, and written back byte for
//! byte while nothing changed it.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::Value;

use super::{Body, Entry, EntryKind, Fields};
use crate::session::message::Extra;

/// A line of a shared file buffer, known to be UTF-8 JSON with a string `type`.
#[derive(Clone)]
pub(crate) struct RawSpan {
    buf: Arc<Vec<u8>>,
    start: usize,
    end: usize,
    pub(super) type_name: Box<str>,
}

impl PartialEq for RawSpan {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl std::fmt::Debug for RawSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RawSpan").field(&self.text()).finish()
    }
}

impl RawSpan {
    /// Whether `entry`'s header fields are still the ones this line holds, so the line can be
    /// written back verbatim.
    pub(super) fn head_matches(&self, entry: &Entry) -> bool {
        let Ok(head) = serde_json::from_str::<Head<'_>>(self.text()) else {
            return false;
        };
        head.id.as_deref().unwrap_or_default() == entry.id
            && head.parent_id.as_deref() == entry.parent_id.as_deref()
            && head.timestamp.as_deref().unwrap_or_default() == entry.timestamp
    }

    pub(super) fn text(&self) -> &str {
        // The loader checked that this span is UTF-8 before it made the span; a failure here
        // would be a loader bug, so fall back to an empty object rather than panic.
        std::str::from_utf8(&self.buf[self.start..self.end]).unwrap_or("{}")
    }

    /// The full parse the eager loader used to do. A line the head parse accepted but
    /// `serde_json::Value` refuses (a number beyond `f64`, a lone surrogate escape) becomes an
    /// unknown entry that keeps its line, so a rewrite writes it back unchanged.
    pub(super) fn parse(&self) -> Fields {
        let parsed = serde_json::from_str::<Value>(self.text())
            .map_err(|e| e.to_string())
            .and_then(|v| Entry::from_value(v).map_err(|e| e.to_string()));
        match parsed {
            Ok(entry) => entry.into_fields(),
            Err(reason) => {
                tracing::warn!(%reason, type_name = %self.type_name, "entry body does not parse");
                Fields {
                    kind: EntryKind::Unknown {
                        type_name: self.type_name.to_string(),
                    },
                    extra: Extra::new(),
                    unparsed: Some(self.clone()),
                }
            }
        }
    }
}

/// `line` (a JSON object) with its `id`, `parentId` and `timestamp` members set to the given
/// values, in place or, when missing, after `type`; every other member is copied as written,
/// so values `serde_json::Value` cannot hold (`1e400`, a lone surrogate) survive. `None` when
/// the line is not an object with string keys.
fn reheaded(line: &str, id: &str, parent_id: Option<&str>, timestamp: &str) -> Option<String> {
    use serde_json::value::RawValue;

    struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);
    impl<'de> Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Members<'de>, A::Error> {
                    let mut out = Vec::new();
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        out.push((key, map.next_value::<&'de RawValue>()?));
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(Visit)
        }
    }

    let Members(members) = serde_json::from_str(line).ok()?;
    let head = [
        ("id", Value::from(id)),
        ("parentId", parent_id.map_or(Value::Null, Value::from)),
        ("timestamp", Value::from(timestamp)),
    ];
    let mut parts: Vec<String> = Vec::with_capacity(members.len() + 3);
    let mut placed = [false; 3];
    for (key, value) in &members {
        let slot = head.iter().position(|(k, _)| *k == key.as_ref());
        let value = match slot {
            Some(i) if placed[i] => continue,
            Some(i) => {
                placed[i] = true;
                head[i].1.to_string()
            }
            None => value.get().to_owned(),
        };
        parts.push(format!("{}:{value}", Value::from(key.as_ref())));
        if key == "type" {
            for (i, (k, v)) in head.iter().enumerate() {
                if !members.iter().any(|(m, _)| m == k) {
                    placed[i] = true;
                    parts.push(format!("{}:{v}", Value::from(*k)));
                }
            }
        }
    }
    Some(format!("{{{}}}", parts.join(",")))
}

/// The fields of a line that every decision needs, borrowed from the line; bodies are skipped.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, rename = "type")]
    type_name: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "parentId")]
    parent_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    timestamp: Option<Cow<'a, str>>,
}

impl Entry {
    /// The line `buf[start..end]` as an entry whose body is parsed on first use. `Err` when
    /// the line is not UTF-8 JSON with the header fields in their usual shape (a string
    /// `type`, string-or-absent ids): the caller then parses it eagerly with
    /// [`Entry::from_value`], which decides exactly as before.
    pub(crate) fn from_shared_line(
        buf: &Arc<Vec<u8>>,
        start: usize,
        end: usize,
    ) -> Result<Entry, ()> {
        let text = std::str::from_utf8(&buf[start..end]).map_err(|_| ())?;
        let head: Head<'_> = serde_json::from_str(text).map_err(|_| ())?;
        Ok(Entry {
            id: head.id.map(Cow::into_owned).unwrap_or_default(),
            parent_id: head.parent_id.map(Cow::into_owned),
            timestamp: head.timestamp.map(Cow::into_owned).unwrap_or_default(),
            body: Body::Raw {
                line: RawSpan {
                    buf: Arc::clone(buf),
                    start,
                    end,
                    type_name: head.type_name.into(),
                },
                parsed: OnceLock::new(),
            },
        })
    }

    /// For an entry whose body could not be parsed: rewrites its kept line so its `id`,
    /// `parentId` and `timestamp` are the entry's current ones (after a migration gave it new
    /// ids), every other member kept as written. Does nothing for other entries.
    pub(crate) fn rehead_unparsed(&mut self) {
        let (id, parent_id, timestamp) = (
            self.id.clone(),
            self.parent_id.clone(),
            self.timestamp.clone(),
        );
        let fields = self.fields_mut();
        let Some(line) = &fields.unparsed else {
            return;
        };
        let Some(text) = reheaded(line.text(), &id, parent_id.as_deref(), &timestamp) else {
            return;
        };
        let bytes = Arc::new(text.into_bytes());
        let end = bytes.len();
        fields.unparsed = Some(RawSpan {
            buf: bytes,
            start: 0,
            end,
            type_name: line.type_name.clone(),
        });
    }
}
