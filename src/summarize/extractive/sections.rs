//! The sections of a structured summary: bounded, deduplicated item lists, and the parser
//! that reads a summary (ours or a model's) back into them.

use std::collections::{HashSet, VecDeque};

use super::text::{clip, condense, fenced, unfence};
use super::{
    ERROR_FROM, FILES_MODIFIED, FILES_READ, FINDING, LATEST_REQUEST, MAX_ERRORS, MAX_FINDINGS,
    MAX_GOALS, MAX_ITEMS, MAX_VERBATIM_CHARS, PENDING_QUESTION,
};

/// Which items of a full section give way to new ones.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Keep {
    /// The first items stay (constraints: the original rules matter most).
    Oldest,
    /// The latest items stay (progress, errors, decisions).
    Newest,
    /// The first item and the latest stay (goals: the original goal and where it went since).
    Ends,
}

/// An ordered, deduplicated, bounded list of items.
#[derive(Clone)]
pub(super) struct Items {
    pub(super) items: VecDeque<String>,
    pub(super) keys: HashSet<String>,
    pub(super) keep: Keep,
    pub(super) cap: usize,
}

impl Items {
    pub(super) fn new(keep: Keep) -> Self {
        Items::with_cap(keep, MAX_ITEMS)
    }

    pub(super) fn with_cap(keep: Keep, cap: usize) -> Self {
        Items {
            items: VecDeque::new(),
            keys: HashSet::new(),
            keep,
            cap: cap.max(2),
        }
    }

    pub(super) fn push(&mut self, item: String) {
        let key = dedupe_key(&item);
        if key.is_empty() || self.keys.contains(&key) {
            return;
        }
        if self.items.len() >= self.cap {
            let dropped = match self.keep {
                Keep::Oldest => return,
                Keep::Newest => self.items.pop_front(),
                Keep::Ends => self.items.remove(1),
            };
            if let Some(dropped) = dropped {
                self.keys.remove(&dedupe_key(&dropped));
            }
        }
        self.keys.insert(key);
        self.items.push_back(item);
    }

    pub(super) fn extend<'a>(&mut self, items: impl IntoIterator<Item = &'a String>) {
        for item in items {
            self.push(item.clone());
        }
    }

    pub(super) fn contains(&self, item: &str) -> bool {
        self.keys.contains(&dedupe_key(item))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(super) fn iter(&self) -> std::collections::vec_deque::Iter<'_, String> {
        self.items.iter()
    }

    /// A copy without the items `drop` rejects.
    pub(super) fn filtered(&self, drop: impl Fn(&str) -> bool) -> Items {
        let mut out = Items::with_cap(self.keep, self.cap);
        out.extend(self.iter().filter(|i| !drop(i)));
        out
    }
}

/// Critical Context, by kind, so an update can replace each kind on its own terms.
#[derive(Clone)]
pub(super) struct Critical {
    pub(super) question: Option<String>,
    pub(super) request: Option<String>,
    pub(super) findings: Items,
    pub(super) errors: Items,
    pub(super) modified: Option<String>,
    pub(super) read: Option<String>,
    pub(super) other: Items,
}

impl Default for Critical {
    fn default() -> Self {
        Critical {
            question: None,
            request: None,
            findings: Items::with_cap(Keep::Newest, MAX_FINDINGS),
            errors: Items::with_cap(Keep::Newest, MAX_ERRORS),
            modified: None,
            read: None,
            other: Items::new(Keep::Newest),
        }
    }
}

impl Critical {
    /// Files an item under its kind, by the label it starts with.
    pub(super) fn push(&mut self, item: String) {
        if let Some(body) = item.strip_prefix(PENDING_QUESTION) {
            self.question = Some(unfence(body));
        } else if let Some(body) = item.strip_prefix(LATEST_REQUEST) {
            self.request = Some(unfence(body));
        } else if item.starts_with(FILES_MODIFIED) {
            self.modified = Some(item);
        } else if item.starts_with(FILES_READ) {
            self.read = Some(item);
        } else if item.starts_with(ERROR_FROM) {
            self.errors.push(item);
        } else if item.starts_with(FINDING) {
            self.findings.push(item);
        } else {
            self.other.push(item);
        }
    }

    pub(super) fn items(&self) -> Items {
        let mut out = Items::with_cap(Keep::Newest, usize::MAX);
        if let Some(q) = &self.question {
            out.push(format!("{PENDING_QUESTION}\n{}", fenced(q)));
        }
        if let Some(r) = &self.request {
            out.push(format!("{LATEST_REQUEST}\n{}", fenced(r)));
        }
        out.extend(self.findings.iter());
        out.extend(self.errors.iter());
        out.extend(self.modified.iter());
        out.extend(self.read.iter());
        out.extend(self.other.iter());
        out
    }
}

/// The sections of a structured summary.
#[derive(Clone)]
pub(super) struct Sections {
    pub(super) goal: Items,
    pub(super) constraints: Items,
    pub(super) done: Items,
    pub(super) in_progress: Items,
    pub(super) blocked: Items,
    pub(super) decisions: Items,
    pub(super) next_steps: Items,
    pub(super) critical: Critical,
    pub(super) notes: Items,
}

impl Default for Sections {
    fn default() -> Self {
        Sections {
            goal: Items::with_cap(Keep::Ends, MAX_GOALS),
            constraints: Items::new(Keep::Oldest),
            done: Items::new(Keep::Newest),
            in_progress: Items::new(Keep::Newest),
            blocked: Items::new(Keep::Newest),
            decisions: Items::new(Keep::Newest),
            next_steps: Items::new(Keep::Newest),
            critical: Critical::default(),
            notes: Items::new(Keep::Newest),
        }
    }
}

/// Which list a parsed line belongs to.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Slot {
    Goal,
    Constraints,
    Done,
    InProgress,
    Blocked,
    Decisions,
    NextSteps,
    Critical,
    Notes,
    /// A turn prefix's verbatim request: condensed into a goal.
    OriginalRequest,
    /// A turn prefix's actions: changes and checks are progress, look-ups are dropped.
    EarlyProgress,
    /// A turn prefix's context: decisions and findings carry over, notes about the then
    /// unseen suffix do not.
    SuffixContext,
    /// The retention guard's section: user constraints carry over, the rest is recomputed.
    Retained,
}

impl Sections {
    pub(super) fn push(&mut self, slot: Slot, item: String) {
        match slot {
            Slot::Goal => self.goal.push(item),
            Slot::Constraints => self.constraints.push(item),
            Slot::Done => self.done.push(item),
            Slot::InProgress => self.in_progress.push(item),
            Slot::Blocked => self.blocked.push(item),
            Slot::Decisions => self.decisions.push(item),
            Slot::NextSteps => self.next_steps.push(item),
            Slot::Critical => self.critical.push(item),
            Slot::Notes => self.notes.push(item),
            Slot::OriginalRequest => self.goal.push(condense(&unfence(&item))),
            Slot::EarlyProgress => {
                let first = item.split_whitespace().next().unwrap_or("");
                let looks_only = [
                    "read", "grep", "find", "glob", "search", "ls", "list", "view",
                ]
                .contains(&first)
                    || first.starts_with('…');
                if let Some((what, error)) = item.split_once(" — failed: ") {
                    self.blocked.push(format!("{what} failed: {error}"));
                } else if !looks_only {
                    self.done.push(item);
                }
            }
            Slot::SuffixContext => {
                if let Some(decision) = item.strip_prefix("Decision: ") {
                    self.decisions.push(decision.to_owned());
                } else if item.starts_with(FINDING)
                    || item.starts_with(FILES_MODIFIED)
                    || item.starts_with(FILES_READ)
                {
                    self.critical.push(item);
                }
            }
            Slot::Retained => {
                if let Some(constraint) = item.strip_prefix("User constraint: ") {
                    self.constraints.push(constraint.to_owned());
                }
            }
        }
    }

    /// Reads a structured summary (ours or a model's) back into sections. Unknown headings
    /// and text outside any heading become notes; file-operation tags are skipped (they are
    /// recomputed and appended by the caller). The sections of a turn prefix and of the
    /// retention guard are read into the matching lists (see [`Slot`]).
    pub(super) fn parse(text: &str) -> Sections {
        let mut sections = Sections::default();
        let mut slot = Slot::Notes;
        let mut current: Option<String> = None;
        let mut fence: Option<String> = None;
        let mut in_file_tag = false;
        let flush = |sections: &mut Sections, slot: Slot, current: &mut Option<String>| {
            if let Some(item) = current.take() {
                sections.push(slot, clip(item.trim_end(), MAX_VERBATIM_CHARS));
            }
        };
        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(open) = &fence {
                let item = current.get_or_insert_with(String::new);
                item.push('\n');
                item.push_str(line);
                if trimmed == open.as_str() {
                    fence = None;
                }
                continue;
            }
            if matches!(trimmed, "<read-files>" | "<modified-files>") {
                in_file_tag = true;
                continue;
            }
            if in_file_tag {
                in_file_tag = !matches!(trimmed, "</read-files>" | "</modified-files>");
                continue;
            }
            if trimmed.starts_with("```") {
                let ticks = trimmed.chars().take_while(|c| *c == '`').count();
                fence = Some("`".repeat(ticks));
                let item = current.get_or_insert_with(String::new);
                if !item.is_empty() {
                    item.push('\n');
                }
                item.push_str(line);
                continue;
            }
            if let Some(heading) = trimmed.strip_prefix('#') {
                flush(&mut sections, slot, &mut current);
                let name = heading.trim_start_matches('#').trim();
                slot = heading_slot(name);
                continue;
            }
            if trimmed.is_empty()
                || trimmed == "---"
                || trimmed == "No prior history."
                || trimmed.starts_with("**Turn Context")
            {
                flush(&mut sections, slot, &mut current);
                continue;
            }
            if let Some(body) = strip_bullet(trimmed) {
                flush(&mut sections, slot, &mut current);
                current = Some(body.to_owned());
            } else {
                let item = current.get_or_insert_with(String::new);
                if !item.is_empty() {
                    item.push('\n');
                }
                item.push_str(trimmed);
            }
        }
        flush(&mut sections, slot, &mut current);
        sections
    }
}

/// The list a heading's items go to.
pub(super) fn heading_slot(name: &str) -> Slot {
    let lower = name.trim_end_matches(':').to_ascii_lowercase();
    match lower.as_str() {
        "goal" | "goals" => Slot::Goal,
        "original request" => Slot::OriginalRequest,
        "early progress" => Slot::EarlyProgress,
        "context for suffix" => Slot::SuffixContext,
        "retained facts" => Slot::Retained,
        "constraints & preferences" | "constraints and preferences" | "constraints" => {
            Slot::Constraints
        }
        "progress" | "done" => Slot::Done,
        "in progress" => Slot::InProgress,
        "blocked" => Slot::Blocked,
        "key decisions" | "decisions" => Slot::Decisions,
        "next steps" => Slot::NextSteps,
        "critical context" => Slot::Critical,
        "additional notes" | "notes" => Slot::Notes,
        _ if lower.starts_with("progress") => Slot::Done,
        _ => Slot::Notes,
    }
}

/// The text of a list item without its marker (`- [x] `, `- `, `* `, `3. `).
pub(super) fn strip_bullet(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("- ")
        .or_else(|| line.strip_prefix("* "))
        .or_else(|| {
            let digits = line.bytes().take_while(u8::is_ascii_digit).count();
            (digits > 0)
                .then(|| &line[digits..])
                .and_then(|r| r.strip_prefix(". ").or_else(|| r.strip_prefix(") ")))
        })?;
    let rest = rest.trim_start();
    Some(
        ["[x] ", "[X] ", "[ ] "]
            .iter()
            .find_map(|b| rest.strip_prefix(b))
            .unwrap_or(rest)
            .trim_start(),
    )
}

/// What two items must share to count as the same: case, markup and spacing ignored.
pub(super) fn dedupe_key(item: &str) -> String {
    let mut key = String::with_capacity(item.len().min(256));
    let mut space = false;
    for c in item.chars().take(MAX_VERBATIM_CHARS) {
        if c.is_alphanumeric() {
            if space && !key.is_empty() {
                key.push(' ');
            }
            space = false;
            key.extend(c.to_lowercase());
        } else if c.is_whitespace() || matches!(c, '*' | '`' | '_' | '.' | ',' | ':' | ';') {
            space = true;
        } else {
            key.push(c);
        }
    }
    key
}

/// The first backtick-quoted span of `item`: the command or path a progress item is about.
pub(super) fn first_code_span(item: &str) -> Option<&str> {
    let start = item.find('`')? + 1;
    let len = item[start..].find('`')?;
    Some(&item[start..start + len])
}
