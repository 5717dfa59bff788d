//! A user's edit of a previewed compaction (`session/commitCompaction` with `summary` or
//! `shortSummary`). The edited text gets what a generated summary gets:
//!
//! * the retention guard: facts the span's summary must carry (the last request, a pending
//!   question, modified files, the final turn's errors, the user's constraints) that the edited
//!   text dropped are appended again under "Retained Facts", and `details.retainedFacts` lists
//!   what was added to the edited text;
//! * the file-operation tags and the `<progress-ledger>` block: re-appended when the user
//!   removed them, kept as written when the user edited them; left as they were, they stay at
//!   the end in the usual order;
//! * `details.edited: true` records that the text is the user's.
//!
//! A compaction a hook supplied is written with the user's text as is (it got no guard either).

use serde_json::Value;

use crate::compaction::ledger::BLOCK_OPEN as LEDGER_OPEN;
use crate::summarize::retention::{self, Fact};

use super::{Drafted, EngineError};

/// The user's text for a previewed compaction; `None` keeps the generated part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryEdit {
    pub summary: Option<String>,
    pub short_summary: Option<String>,
}

impl SummaryEdit {
    /// Whether the user changed anything.
    pub fn is_edit(&self) -> bool {
        self.summary.is_some() || self.short_summary.is_some()
    }
}

/// What an edited summary needs to be treated like the generated one.
#[derive(Debug, Clone)]
pub(crate) struct EditKit {
    /// The file-operation tags (with the blank line before them), or empty.
    pub file_block: String,
    /// The progress-ledger block (with the blank line before it), or empty.
    pub ledger_block: String,
    /// The facts the retention guard checks.
    pub facts: Vec<Fact>,
}

/// The `details` key recording that the user edited the text.
pub const EDITED_KEY: &str = "edited";

impl Drafted {
    /// Replaces the generated text with the user's (see the module doc).
    pub(super) fn apply_edit(&mut self, edit: SummaryEdit) -> Result<(), EngineError> {
        if !edit.is_edit() {
            return Ok(());
        }
        if let Some(text) = edit.summary {
            // The target was the generated text's; the user's text is the user's choice.
            self.target = None;
            if text.trim().is_empty() {
                return Err(EngineError::InvalidParams(
                    "summary is empty: give the text to write, or leave summary out to keep \
                     the previewed one"
                        .into(),
                ));
            }
            self.summary = match &self.kit {
                Some(kit) => {
                    let (summary, added) = kit.treat(&text);
                    set_retained(&mut self.details, &added);
                    summary
                }
                None => text,
            };
        }
        if let Some(short) = edit.short_summary {
            self.short_summary = Some(short.trim().to_owned()).filter(|s| !s.is_empty());
        }
        if let Value::Object(map) = &mut self.details {
            map.insert(EDITED_KEY.to_owned(), Value::Bool(true));
        } else {
            self.details = serde_json::json!({ EDITED_KEY: true });
        }
        Ok(())
    }
}

impl EditKit {
    /// The user's `text` guarded, with the blocks it lacks re-appended; and the facts added.
    fn treat(&self, text: &str) -> (String, Vec<Fact>) {
        // Blocks left exactly as generated are taken off and put back in the usual order, so
        // retained facts land before them as in a generated summary.
        let mut body = text.trim_end();
        let ledger = self.ledger_block.trim();
        if !ledger.is_empty()
            && let Some(rest) = body.strip_suffix(ledger)
        {
            body = rest.trim_end();
        }
        let files = self.file_block.trim();
        if !files.is_empty()
            && let Some(rest) = body.strip_suffix(files)
        {
            body = rest.trim_end();
        }
        let has_files = body.contains("<read-files>") || body.contains("<modified-files>");
        let file_block = if has_files { "" } else { &self.file_block };
        let ledger_block = if body.contains(LEDGER_OPEN) {
            ""
        } else {
            &self.ledger_block
        };
        let (guarded, added) = retention::apply_guard(body, file_block, &self.facts);
        (format!("{guarded}{file_block}{ledger_block}"), added)
    }
}

/// `details.retainedFacts` as the edited text needs it: what the guard added to it.
fn set_retained(details: &mut Value, added: &[Fact]) {
    if let Value::Object(map) = details {
        map.remove("retainedFacts");
    }
    retention::record_in_details(details, added);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarize::retention::FactKind;

    fn kit() -> EditKit {
        EditKit {
            file_block: "\n\n<modified-files>\nsrc/a.rs\n</modified-files>".into(),
            ledger_block: format!("\n\n{LEDGER_OPEN}\n- next: ship\n</progress-ledger>"),
            facts: vec![
                Fact {
                    kind: FactKind::LastUserRequest,
                    text: "make the build green".into(),
                },
                Fact {
                    kind: FactKind::ModifiedFile,
                    text: "src/a.rs".into(),
                },
            ],
        }
    }

    #[test]
    fn removed_blocks_and_dropped_facts_come_back() {
        let (text, added) = kit().treat("The user's own summary.");
        assert!(text.starts_with("The user's own summary.\n\n## Retained Facts"));
        assert!(text.contains("Last user request: make the build green"));
        assert!(text.contains("<modified-files>\nsrc/a.rs"));
        assert!(text.trim_end().ends_with("</progress-ledger>"));
        // The file path is carried by the re-appended tags, so only the request was added.
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].kind, FactKind::LastUserRequest);
    }

    #[test]
    fn untouched_blocks_stay_once_in_order() {
        let k = kit();
        let edited = format!(
            "Goal: make the build green.{}{}",
            k.file_block, k.ledger_block
        );
        let (text, added) = k.treat(&edited);
        assert!(added.is_empty());
        assert_eq!(text, edited);
        assert_eq!(text.matches(LEDGER_OPEN).count(), 1);
        assert_eq!(text.matches("<modified-files>").count(), 1);
    }

    #[test]
    fn a_block_the_user_edited_is_kept_as_written() {
        let k = kit();
        let edited = "Goal: make the build green.\n\n<modified-files>\nsrc/a.rs\nsrc/b.rs\n\
                      </modified-files>";
        let (text, _) = k.treat(edited);
        assert_eq!(text.matches("<modified-files>").count(), 1);
        assert!(text.contains("src/b.rs"));
        assert!(text.contains(LEDGER_OPEN));
    }
}
