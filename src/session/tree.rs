//! The entry tree of a session (spec §1.3): parent and children links, root→entry paths,
//! common ancestors, labels, and the tree view sent to clients.
//!
//! Everything here is linear in the number of entries and iterative, so a chain of 100k
//! entries neither takes quadratic time nor overflows the stack. Broken files never hang it:
//! an entry whose parent is missing or itself is an extra root, and a parent cycle is broken
//! at its first entry in file order. `compactd_leaf` markers are never nodes: an entry
//! attached to a marker (as the reference does when it appends after one) hangs from the
//! marker's parent.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::entry::{Entry, EntryKind};
use super::message::{AgentMessage, ContentBlock, join_text};

/// The root→`start` path through `parentId`, markers left out. Stops at a missing parent or
/// at an entry already visited (a cycle).
#[cfg(test)]
pub(crate) fn walk_path(
    entries: &[Entry],
    start: usize,
    lookup: impl Fn(&str) -> Option<usize>,
) -> Vec<&Entry> {
    walk_path_indices(entries, start, |_, parent| lookup(parent))
        .into_iter()
        .map(|i| &entries[i])
        .collect()
}

/// The root→`start` path as indices into `entries`, markers left out, stopping at a missing
/// parent or a cycle; `parent_of(child, parent_id)` finds the parent of `entries[child]`.
pub(crate) fn walk_path_indices(
    entries: &[Entry],
    start: usize,
    parent_of: impl Fn(usize, &str) -> Option<usize>,
) -> Vec<usize> {
    // One bit per entry: cheaper than hashing every index of a long path.
    let mut seen = vec![0u64; entries.len().div_ceil(64)];
    let mut out = Vec::new();
    let mut current = Some(start);
    while let Some(i) = current {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if seen[word] & bit != 0 {
            break;
        }
        seen[word] |= bit;
        let entry = &entries[i];
        if !is_marker(entry) {
            out.push(i);
        }
        current = entry.parent_id.as_deref().and_then(|p| parent_of(i, p));
    }
    out.reverse();
    out
}

pub(crate) fn is_marker(entry: &Entry) -> bool {
    entry.is_leaf_move()
}

/// Parent/children index over a slice of entries.
#[derive(Debug)]
pub struct Tree<'a> {
    entries: &'a [Entry],
    /// id -> first entry with it.
    index: HashMap<&'a str, usize>,
    /// Effective parent (markers skipped); `None` for a root. Only meaningful for nodes.
    parent: Vec<Option<usize>>,
    /// Children sorted by timestamp (file order on ties).
    children: Vec<Vec<usize>>,
    roots: Vec<usize>,
    labels: HashMap<&'a str, &'a str>,
}

impl<'a> Tree<'a> {
    pub fn new(entries: &'a [Entry]) -> Self {
        let mut index = HashMap::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            index.entry(e.id.as_str()).or_insert(i);
        }
        let n = entries.len();
        let is_node: Vec<bool> = (0..n)
            .map(|i| !is_marker(&entries[i]) && index.get(entries[i].id.as_str()) == Some(&i))
            .collect();
        let mut through_marker: Vec<Option<Option<usize>>> = vec![None; n];
        let mut parent = vec![None; n];
        let mut children = vec![Vec::new(); n];
        let mut roots = Vec::new();
        for i in (0..n).filter(|&i| is_node[i]) {
            let p = entries[i]
                .parent_id
                .as_deref()
                .and_then(|p| index.get(p).copied())
                .and_then(|p| resolve_markers(entries, &index, p, &mut through_marker))
                .filter(|&p| p != i);
            parent[i] = p;
            match p {
                Some(p) => children[p].push(i),
                None => roots.push(i),
            }
        }
        for list in &mut children {
            list.sort_by(|&a, &b| entries[a].timestamp.cmp(&entries[b].timestamp));
        }
        let mut tree = Tree {
            entries,
            index,
            parent,
            children,
            roots,
            labels: HashMap::new(),
        };
        tree.break_cycles(&is_node);
        tree.labels = labels_of(entries);
        tree
    }

    /// Nodes not reachable from a root sit on (or under) a parent cycle: make the first such
    /// node in file order a root and repeat.
    fn break_cycles(&mut self, is_node: &[bool]) {
        let n = self.entries.len();
        let mut reached = vec![false; n];
        for r in self.roots.clone() {
            self.mark(r, &mut reached);
        }
        for i in 0..n {
            if reached[i] || !is_node[i] {
                continue;
            }
            if let Some(p) = self.parent[i].take() {
                self.children[p].retain(|&c| c != i);
            }
            self.roots.push(i);
            self.mark(i, &mut reached);
        }
    }

    fn mark(&self, root: usize, reached: &mut [bool]) {
        let mut stack = vec![root];
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut reached[i], true) {
                continue;
            }
            stack.extend(&self.children[i]);
        }
    }

    /// The roots, in file order.
    pub fn roots(&self) -> impl Iterator<Item = &'a Entry> + '_ {
        self.roots.iter().map(|&i| &self.entries[i])
    }

    /// The children of `id`, sorted by timestamp.
    pub fn children(&self, id: &str) -> Vec<&'a Entry> {
        self.node(id)
            .map(|i| self.children[i].iter().map(|&c| &self.entries[c]).collect())
            .unwrap_or_default()
    }

    /// The parent of `id` as the tree sees it (markers skipped, cycles broken).
    pub fn parent(&self, id: &str) -> Option<&'a Entry> {
        let i = self.node(id)?;
        self.parent[i].map(|p| &self.entries[p])
    }

    fn node(&self, id: &str) -> Option<usize> {
        self.index
            .get(id)
            .copied()
            .filter(|&i| !is_marker(&self.entries[i]))
    }

    /// The root→`id` path (root first); empty for an unknown id.
    pub fn path_to(&self, id: &str) -> Vec<&'a Entry> {
        let mut out = Vec::new();
        let mut current = self.node(id);
        while let Some(i) = current {
            out.push(&self.entries[i]);
            current = self.parent[i];
        }
        out.reverse();
        out
    }

    /// The deepest entry on both root paths, if they share a root.
    pub fn common_ancestor(&self, a: &str, b: &str) -> Option<&'a Entry> {
        let on_a: HashSet<usize> = {
            let mut set = HashSet::new();
            let mut current = self.node(a);
            while let Some(i) = current {
                set.insert(i);
                current = self.parent[i];
            }
            set
        };
        let mut current = self.node(b);
        while let Some(i) = current {
            if on_a.contains(&i) {
                return Some(&self.entries[i]);
            }
            current = self.parent[i];
        }
        None
    }

    /// target id -> label, the last `label` entry per target winning.
    pub fn labels(&self) -> &HashMap<&'a str, &'a str> {
        &self.labels
    }

    /// The nodes in pre-order (roots in file order, children by timestamp) with their depth.
    fn preorder(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::with_capacity(self.entries.len());
        let mut stack: Vec<(usize, usize)> = self.roots.iter().rev().map(|&r| (r, 0)).collect();
        while let Some((i, depth)) = stack.pop() {
            out.push((i, depth));
            stack.extend(self.children[i].iter().rev().map(|&c| (c, depth + 1)));
        }
        out
    }

    fn view(&self, i: usize) -> TreeNode {
        let e = &self.entries[i];
        TreeNode {
            id: e.id.clone(),
            parent_id: self.parent[i].map(|p| self.entries[p].id.clone()),
            entry_type: e.type_name().to_owned(),
            role: e.message().map(|m| m.role().to_owned()),
            label: self.labels.get(e.id.as_str()).map(|l| (*l).to_owned()),
            preview: preview(e),
            timestamp: e.timestamp.clone(),
            children: Vec::new(),
        }
    }

    /// The client tree view: one nested node per entry (markers hidden), built without
    /// recursion.
    ///
    /// Serialising the nested form recurses once per level (as serde does for any nested
    /// value), and JSON parsers commonly cap nesting at 128 levels; for deep sessions send
    /// [`Tree::flat_nodes`] instead.
    pub fn nodes(&self) -> Vec<TreeNode> {
        let order = self.preorder();
        let mut slots: Vec<Option<TreeNode>> = (0..self.entries.len()).map(|_| None).collect();
        // Children come after their parent in pre-order, so in reverse they are complete
        // before their parent is built.
        for &(i, _) in order.iter().rev() {
            let mut node = self.view(i);
            node.children = self.children[i]
                .iter()
                .filter_map(|&c| slots[c].take())
                .collect();
            slots[i] = Some(node);
        }
        self.roots.iter().filter_map(|&r| slots[r].take()).collect()
    }

    /// The same nodes, flat, in pre-order with their depth: safe for any depth.
    pub fn flat_nodes(&self) -> Vec<FlatTreeNode> {
        self.preorder()
            .into_iter()
            .map(|(i, depth)| {
                let mut v = self.view(i);
                FlatTreeNode {
                    id: std::mem::take(&mut v.id),
                    parent_id: v.parent_id.take(),
                    entry_type: std::mem::take(&mut v.entry_type),
                    role: v.role.take(),
                    label: v.label.take(),
                    preview: std::mem::take(&mut v.preview),
                    timestamp: std::mem::take(&mut v.timestamp),
                    depth,
                }
            })
            .collect()
    }
}

/// For a marker at `start`, the first non-marker up its parent chain (memoised, cycle-safe);
/// for a non-marker, itself.
fn resolve_markers(
    entries: &[Entry],
    index: &HashMap<&str, usize>,
    start: usize,
    memo: &mut [Option<Option<usize>>],
) -> Option<usize> {
    let mut visited = Vec::new();
    let mut current = Some(start);
    let result = loop {
        let Some(i) = current else { break None };
        if !is_marker(&entries[i]) {
            break Some(i);
        }
        if let Some(known) = memo[i] {
            break known;
        }
        if visited.contains(&i) {
            break None;
        }
        visited.push(i);
        current = entries[i]
            .parent_id
            .as_deref()
            .and_then(|p| index.get(p).copied());
    };
    for i in visited {
        memo[i] = Some(result);
    }
    result
}

/// target id -> label from `label` entries in file order; the last one wins, an absent or
/// empty label clears.
pub fn labels_of(entries: &[Entry]) -> HashMap<&str, &str> {
    let mut labels = HashMap::new();
    // The wire type first: only label entries are parsed.
    for e in entries.iter().filter(|e| e.type_name() == "label") {
        if let EntryKind::Label { target_id, label } = e.kind() {
            match label.as_deref().filter(|l| !l.is_empty()) {
                Some(l) => labels.insert(target_id.as_str(), l),
                None => labels.remove(target_id.as_str()),
            };
        }
    }
    labels
}

/// One entry in the client tree view.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeNode {
    pub id: String,
    pub parent_id: Option<String>,
    /// The entry's `type`.
    pub entry_type: String,
    /// The message role, for `message` entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// One line, at most about 80 characters.
    pub preview: String,
    pub timestamp: String,
    pub children: Vec<TreeNode>,
}

impl Drop for TreeNode {
    /// Iterative, so dropping a 100k-deep chain does not overflow the stack.
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.children);
        while let Some(mut node) = stack.pop() {
            stack.append(&mut node.children);
        }
    }
}

/// [`TreeNode`] without nesting: `parentId` links and the depth, in pre-order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlatTreeNode {
    pub id: String,
    pub parent_id: Option<String>,
    pub entry_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub preview: String,
    pub timestamp: String,
    pub depth: usize,
}

const PREVIEW_CHARS: usize = 80;

/// A short single-line description of an entry for tree views.
pub fn preview(entry: &Entry) -> String {
    let text = match entry.kind() {
        EntryKind::Message(m) => message_preview(m),
        EntryKind::ThinkingLevelChange { thinking_level } => format!("thinking: {thinking_level}"),
        EntryKind::ModelChange { model, role } => format!(
            "model{}: {}",
            role.as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            model.as_deref().unwrap_or("?")
        ),
        EntryKind::Compaction(c) => format!("[compaction] {}", c.summary),
        EntryKind::BranchSummary(b) => format!("[branch summary] {}", b.summary),
        EntryKind::Custom { custom_type, .. } => format!("[{custom_type}]"),
        EntryKind::CustomMessage(c) => {
            format!("[{}] {}", c.custom_type, c.content.joined_text(" "))
        }
        EntryKind::Label { target_id, label } => match label {
            Some(l) => format!("label {target_id}: {l}"),
            None => format!("label {target_id} cleared"),
        },
        EntryKind::TtsrInjection { injected_rules } => {
            format!("rules: {}", injected_rules.join(", "))
        }
        EntryKind::SessionInit { .. } => "session init".to_owned(),
        EntryKind::ModeChange { mode, .. } => format!("mode: {mode}"),
        EntryKind::LeafMove | EntryKind::Unknown { .. } => entry.type_name().to_owned(),
    };
    one_line(&text, PREVIEW_CHARS)
}

fn message_preview(m: &AgentMessage) -> String {
    match m {
        AgentMessage::User(u) => u.content.joined_text(" "),
        AgentMessage::Assistant(a) => {
            let text = join_text(&a.content, " ");
            if !text.trim().is_empty() {
                return text;
            }
            let calls: Vec<&str> = a.tool_calls().map(|c| c.name.as_str()).collect();
            if !calls.is_empty() {
                return format!("→ {}", calls.join(", "));
            }
            let thinking = a.content.iter().find_map(|b| match b {
                ContentBlock::Thinking(t) => Some(t.thinking.as_str()),
                _ => None,
            });
            thinking.map_or_else(String::new, |t| format!("(thinking) {t}"))
        }
        AgentMessage::ToolResult(t) => format!("{}: {}", t.tool_name, join_text(&t.content, " ")),
        AgentMessage::BashExecution(e) => format!("$ {}", e.source()),
        AgentMessage::PythonExecution(e) => format!(">>> {}", e.source()),
        AgentMessage::Custom(c) => format!("[{}] {}", c.custom_type, c.content.joined_text(" ")),
        AgentMessage::BranchSummary(b) => format!("[branch summary] {}", b.summary),
        AgentMessage::CompactionSummary(c) => format!("[compaction] {}", c.summary),
        AgentMessage::FileMention(f) => {
            let paths: Vec<&str> = f.files.iter().map(|f| f.path.as_str()).collect();
            format!("@{}", paths.join(", @"))
        }
        AgentMessage::Unknown(_) => m.role().to_owned(),
    }
}

/// Collapses whitespace runs to one space and cuts to `max` characters (ending in `…`).
/// Looks at no more of `text` than it needs.
fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut count = 0;
    let mut pending_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            pending_space = count > 0;
            continue;
        }
        if pending_space {
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        out.push(c);
        count += 1;
        if count > max {
            let cut: String = out.chars().take(max.saturating_sub(1)).collect();
            return format!("{}…", cut.trim_end());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn e(id: &str, parent: Option<&str>, ts: &str) -> Entry {
        Entry::from_value(
            json!({"type": "message", "id": id, "parentId": parent, "timestamp": ts,
            "message": {"role": "user", "content": format!("text of {id}")}}),
        )
        .unwrap()
    }

    fn custom(id: &str, parent: Option<&str>) -> Entry {
        Entry::new(
            id,
            parent.map(Into::into),
            "2026-01-01T00:00:00.000Z",
            EntryKind::Custom {
                custom_type: "t".into(),
                data: None,
            },
        )
    }

    fn ids(entries: &[&Entry]) -> Vec<String> {
        entries.iter().map(|e| e.id.clone()).collect()
    }

    /// (id, depth) in pre-order.
    fn shape(tree: &Tree) -> Vec<(String, usize)> {
        tree.flat_nodes()
            .into_iter()
            .map(|n| (n.id, n.depth))
            .collect()
    }

    #[test]
    fn children_are_sorted_by_timestamp_and_paths_run_root_first() {
        let entries = [
            e("1", None, "2026-01-01T00:00:01Z"),
            e("2", Some("1"), "2026-01-01T00:00:02Z"),
            e("4", Some("1"), "2026-01-01T00:00:05Z"),
            e("3", Some("1"), "2026-01-01T00:00:03Z"),
            e("5", Some("3"), "2026-01-01T00:00:06Z"),
        ];
        let tree = Tree::new(&entries);
        assert_eq!(ids(&tree.children("1")), ["2", "3", "4"]);
        assert_eq!(ids(&tree.path_to("5")), ["1", "3", "5"]);
        assert!(tree.path_to("nope").is_empty());
        assert_eq!(tree.parent("5").map(|p| p.id.as_str()), Some("3"));
        assert_eq!(tree.common_ancestor("5", "4").unwrap().id, "1");
        assert_eq!(tree.common_ancestor("5", "5").unwrap().id, "5");
        assert_eq!(tree.common_ancestor("5", "nope"), None);
        assert_eq!(
            shape(&tree),
            [
                ("1".into(), 0),
                ("2".into(), 1),
                ("3".into(), 1),
                ("5".into(), 2),
                ("4".into(), 1)
            ]
        );
        let nodes = tree.nodes();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].children.len(), 3);
        assert_eq!(nodes[0].children[1].children[0].id, "5");
        assert_eq!(
            nodes[0].children[1].children[0].parent_id.as_deref(),
            Some("3")
        );
        assert_eq!(nodes[0].role.as_deref(), Some("user"));
        assert_eq!(nodes[0].preview, "text of 1");
    }

    #[test]
    fn orphans_self_parents_and_cycles_become_roots() {
        let entries = [
            e("r", None, "t1"),
            e("orphan", Some("missing"), "t2"),
            e("me", Some("me"), "t3"),
            e("a", Some("b"), "t4"),
            e("b", Some("a"), "t5"),
            e("c", Some("b"), "t6"),
        ];
        let tree = Tree::new(&entries);
        let roots: Vec<&str> = tree.roots().map(|r| r.id.as_str()).collect();
        assert_eq!(roots, ["r", "orphan", "me", "a"]);
        assert_eq!(
            tree.flat_nodes().len(),
            entries.len(),
            "every entry appears once"
        );
        assert_eq!(ids(&tree.path_to("c")), ["a", "b", "c"]);
    }

    #[test]
    fn markers_are_hidden_and_their_children_hang_from_the_marker_parent() {
        let mut marker = custom("m", Some("1"));
        *marker.kind_mut() = EntryKind::LeafMove;
        let entries = [
            e("1", None, "t1"),
            e("2", Some("1"), "t2"),
            marker,
            e("3", Some("m"), "t3"),
        ];
        let tree = Tree::new(&entries);
        assert_eq!(
            shape(&tree),
            [("1".into(), 0), ("2".into(), 1), ("3".into(), 1)]
        );
        assert_eq!(ids(&tree.path_to("3")), ["1", "3"]);
        assert!(tree.path_to("m").is_empty());
        assert_eq!(tree.flat_nodes()[2].parent_id.as_deref(), Some("1"));
    }

    #[test]
    fn labels_last_wins_and_empty_clears() {
        let label = |id: &str, target: &str, l: Option<&str>| {
            let mut e = custom(id, None);
            *e.kind_mut() = EntryKind::Label {
                target_id: target.into(),
                label: l.map(Into::into),
            };
            e
        };
        let entries = [
            e("1", None, "t"),
            e("2", Some("1"), "t"),
            label("l1", "1", Some("first")),
            label("l2", "1", Some("second")),
            label("l3", "2", Some("two")),
            label("l4", "2", None),
            label("l5", "l1", Some("")),
        ];
        let tree = Tree::new(&entries);
        assert_eq!(tree.labels().get("1"), Some(&"second"));
        assert_eq!(tree.labels().get("2"), None);
        let nodes = tree.flat_nodes();
        assert_eq!(nodes[0].label.as_deref(), Some("second"));
        assert_eq!(nodes[1].label, None);
    }

    #[test]
    fn deep_chains_are_linear_and_stack_safe() {
        const N: usize = 100_000;
        let entries: Vec<Entry> = (0..N)
            .map(|i| {
                let parent = i.checked_sub(1).map(|p| format!("e{p}"));
                custom(&format!("e{i}"), parent.as_deref())
            })
            .collect();
        // A small stack proves nothing here recurses per level.
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let tree = Tree::new(&entries);
                assert_eq!(tree.path_to(&format!("e{}", N - 1)).len(), N);
                let nodes = tree.nodes();
                assert_eq!(nodes.len(), 1);
                let flat = tree.flat_nodes();
                assert_eq!(flat.last().unwrap().depth, N - 1);
                drop(nodes);
                let path = walk_path(&entries, N - 1, |id| id[1..].parse().ok());
                assert_eq!(path.len(), N);
            })
            .unwrap();
        handle.join().unwrap();
    }

    #[test]
    fn previews_are_one_short_line() {
        let long = "word ".repeat(100);
        let entry = Entry::from_value(json!({"type": "message", "id": "x", "parentId": null, "timestamp": "t",
            "message": {"role": "assistant", "content": [{"type": "toolCall", "id": "c", "name": "read", "arguments": {}}]}}))
        .unwrap();
        assert_eq!(preview(&entry), "→ read");
        let p = one_line(&format!("  {long}\n\nmore"), 80);
        assert_eq!(p.chars().count(), 80);
        assert!(p.ends_with('…') && !p.contains('\n'));
        assert_eq!(one_line("a\n\t b", 80), "a b");
        assert_eq!(one_line(&"x".repeat(80), 80), "x".repeat(80));
    }
}
