//! The sections of a structured summary: bounded, deduplicated item lists, and the parser
//! that reads a summary (ours or a model's) back into them.

use std::collections::{HashSet, VecDeque};

use super::text::{clip, condense, fenced, plain_sentence, unfence};
use super::{
    CHANGED_DIRECTION, CURRENT_REQUEST, ERROR_FROM, FINDING, LATEST_MESSAGE, LATEST_REQUEST_V1,
    MAX_BLOCKED, MAX_CARRIED_BLOCK_LINES, MAX_CONSTRAINTS, MAX_DECISIONS, MAX_DONE, MAX_ERRORS,
    MAX_FINDINGS, MAX_GOALS, MAX_IN_PROGRESS, MAX_NEXT_STEPS, MAX_NOTES, MAX_VERBATIM_CHARS,
    PENDING_QUESTION, REPLY_TO, THEN,
};

/// Which items of a full section give way to new ones.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Keep {
    /// The first items stay (lists built best first: next steps, work in progress).
    Oldest,
    /// The latest items stay (progress, errors, decisions).
    Newest,
    /// The first `n` items and the latest stay (goals: the original goal and where it went
    /// since; constraints: the first rules and the latest).
    Ends(usize),
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
                Keep::Ends(n) => self.items.remove(n.min(self.cap - 1)),
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
    /// What the latest message answers, when it is only a short reply.
    pub(super) reply_to: Option<String>,
    pub(super) findings: Items,
    pub(super) errors: Items,
    pub(super) other: Items,
}

impl Default for Critical {
    fn default() -> Self {
        Critical::scaled(1.0)
    }
}

/// `cap` for the detail scale `scale` (`compaction.detail`, a request's `targetTokens`):
/// at least 1.
pub(super) fn scaled(cap: usize, scale: f64) -> usize {
    ((cap as f64 * scale.clamp(0.25, 4.0)).round() as usize).max(1)
}

impl Critical {
    fn scaled(scale: f64) -> Self {
        Critical {
            question: None,
            request: None,
            reply_to: None,
            findings: Items::with_cap(Keep::Newest, scaled(MAX_FINDINGS, scale)),
            errors: Items::with_cap(Keep::Newest, scaled(MAX_ERRORS, scale)),
            other: Items::with_cap(Keep::Newest, scaled(MAX_NOTES, scale)),
        }
    }
}

impl Critical {
    /// Files an item under its kind, by the label it starts with. File lists are dropped:
    /// the caller appends the file tags to every summary.
    pub(super) fn push(&mut self, item: String) {
        if let Some(body) = item.strip_prefix(PENDING_QUESTION) {
            self.question = Some(unfence(body));
        } else if let Some(body) = item
            .strip_prefix(LATEST_MESSAGE)
            .or_else(|| item.strip_prefix(LATEST_REQUEST_V1))
        {
            self.request = Some(unfence(body));
        } else if let Some(body) = item.strip_prefix(REPLY_TO) {
            self.reply_to = Some(unfence(body));
        } else if item.starts_with("Files modified:") || item.starts_with("Files read:") {
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
            out.push(format!("{LATEST_MESSAGE}\n{}", fenced(r)));
            if let Some(answered) = &self.reply_to {
                out.push(format!("{REPLY_TO}\n{}", fenced(answered)));
            }
        }
        out.extend(self.findings.iter());
        out.extend(self.errors.iter());
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
    /// The detail scale the section caps were sized with (1.0: `normal`).
    pub(super) scale: f64,
}

impl Default for Sections {
    fn default() -> Self {
        Sections::scaled(1.0)
    }
}

impl Sections {
    /// Empty sections whose caps are the usual ones times `scale` (`brief` 0.5, `thorough` 2).
    pub(super) fn scaled(scale: f64) -> Self {
        let cap = |n| scaled(n, scale);
        Sections {
            goal: Items::with_cap(Keep::Ends(1), cap(MAX_GOALS)),
            constraints: Items::with_cap(Keep::Ends(3), cap(MAX_CONSTRAINTS)),
            done: Items::with_cap(Keep::Newest, cap(MAX_DONE)),
            in_progress: Items::with_cap(Keep::Oldest, cap(MAX_IN_PROGRESS)),
            blocked: Items::with_cap(Keep::Newest, cap(MAX_BLOCKED)),
            decisions: Items::with_cap(Keep::Newest, cap(MAX_DECISIONS)),
            next_steps: Items::with_cap(Keep::Oldest, cap(MAX_NEXT_STEPS)),
            critical: Critical::scaled(scale),
            notes: Items::with_cap(Keep::Newest, cap(MAX_NOTES)),
            scale,
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
                    "read", "grep", "find", "glob", "search", "searched", "ls", "list", "view",
                ]
                .contains(&first)
                    || first.starts_with('…')
                    || item.ends_with(" — aborted")
                    || item.ends_with(" — no match");
                if let Some((what, error)) = item.split_once(" — failed: ") {
                    self.blocked.push(format!("{what} failed: {error}"));
                } else if !looks_only {
                    self.done.push(item);
                }
            }
            Slot::SuffixContext => {
                if let Some(decision) = item.strip_prefix("Decision: ") {
                    self.decisions.push(decision.to_owned());
                } else if item.starts_with(FINDING) {
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
        // A heading of a model's own that maps to Critical Context ("Key Files", "Branch")
        // names its items, so they keep their meaning there.
        let mut label: Option<String> = None;
        let mut current: Option<String> = None;
        let mut fence: Option<String> = None;
        let mut in_file_tag = false;
        let flush = |sections: &mut Sections,
                     slot: Slot,
                     label: &Option<String>,
                     current: &mut Option<String>| {
            let Some(item) = current.take() else {
                return;
            };
            let item = item.trim_end();
            // A lead-in whose list was read as items of its own ("All core work is done:").
            let item = if item.ends_with(':') && !item.contains('\n') {
                match plain_sentence(item) {
                    Some(item) => item,
                    None => return,
                }
            } else {
                item.to_owned()
            };
            // Fenced blocks of a model's own (a tree, a snippet) are notes, whatever heading
            // they sat under.
            let fenced_block =
                item.starts_with("```") && !matches!(slot, Slot::Critical | Slot::OriginalRequest);
            let slot = if fenced_block { Slot::Notes } else { slot };
            let lines = item.lines().count();
            let item = if fenced_block && lines > MAX_CARRIED_BLOCK_LINES {
                format!(
                    "A {lines}-line code block of the previous summary is left out here; \
                     the earlier compaction entry keeps it."
                )
            } else {
                item
            };
            let item = match label {
                Some(label) if slot == Slot::Critical => format!("{label}: {item}"),
                _ => item,
            };
            sections.push(slot, clip(&item, MAX_VERBATIM_CHARS));
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
                flush(&mut sections, slot, &label, &mut current);
                let level = 1 + heading.chars().take_while(|c| *c == '#').count();
                let name = heading.trim_start_matches('#').trim();
                let next = heading_slot(name);
                // A subsection of a known section that is not itself known ("### Agreed
                // Structure" under "## Current Task") goes to the notes.
                if level > 2 && next == Slot::Notes && slot != Slot::Notes {
                    slot = Slot::Notes;
                    label = None;
                    continue;
                }
                slot = next;
                label = (slot == Slot::Critical && !name.eq_ignore_ascii_case("critical context"))
                    .then(|| name.trim_end_matches(':').to_owned());
                continue;
            }
            if trimmed.is_empty()
                || trimmed == "---"
                || trimmed == "No prior history."
                || trimmed.starts_with("**Turn Context")
            {
                flush(&mut sections, slot, &label, &mut current);
                continue;
            }
            if let Some(body) = strip_bullet(trimmed) {
                flush(&mut sections, slot, &label, &mut current);
                current = Some(body.to_owned());
            } else {
                let item = current.get_or_insert_with(String::new);
                if !item.is_empty() {
                    item.push('\n');
                }
                item.push_str(trimmed);
            }
        }
        flush(&mut sections, slot, &label, &mut current);
        sections
    }
}

/// The list a heading's items go to: ours, the prompts', and the ones models write of their
/// own accord ("Completed Work", "Current Task", "User Preferences", "Key Files").
pub(super) fn heading_slot(name: &str) -> Slot {
    let lower = name.trim_end_matches(':').to_ascii_lowercase();
    let lower = lower.as_str();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| lower.starts_with(p));
    match lower {
        "original request" => Slot::OriginalRequest,
        "early progress" => Slot::EarlyProgress,
        "context for suffix" => Slot::SuffixContext,
        "retained facts" => Slot::Retained,
        "in progress" | "work in progress" | "status" => Slot::InProgress,
        "additional notes" | "notes" => Slot::Notes,
        _ if starts(&["goal", "objective", "task"]) => Slot::Goal,
        _ if starts(&[
            "constraint",
            "user preference",
            "preference",
            "rules",
            "requirement",
        ]) =>
        {
            Slot::Constraints
        }
        _ if starts(&["progress", "done", "completed", "accomplished", "work done"]) => Slot::Done,
        _ if starts(&["current", "ongoing"]) => Slot::InProgress,
        _ if starts(&["blocked", "blocker", "known issue", "open issue"]) => Slot::Blocked,
        _ if starts(&["key decision", "decision", "design decision"]) => Slot::Decisions,
        _ if starts(&["next", "todo", "to do", "remaining"]) => Slot::NextSteps,
        _ if starts(&[
            "critical",
            "key file",
            "important file",
            "relevant file",
            "files",
            "branch",
            "repository",
            "git",
            "command",
            "environment",
            "open question",
            "pending",
            "error",
            "context",
        ]) =>
        {
            Slot::Critical
        }
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

/// What two items must share to count as the same: case, markup, spacing and our own labels
/// ("Current request:") ignored.
pub(super) fn dedupe_key(item: &str) -> String {
    let item = [CURRENT_REQUEST, CHANGED_DIRECTION, THEN, "Latest request:"]
        .iter()
        .find_map(|l| item.strip_prefix(l))
        .unwrap_or(item);
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
