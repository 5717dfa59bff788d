//! The layer rules of the design, held by reading the sources (as rust-analyzer's tidy tests
//! read theirs): the table in `src/lib.rs` says which layers each layer imports, top to bottom;
//! the code must import exactly those, only layers below it, and no more. Inside a layer the
//! files import one another without a circle. On top of that, `compaction` does no I/O, and
//! `src/main.rs` only calls the command line. A layer's root re-exports only names some file
//! outside the layer uses; what only tests, benches, fuzzing and devtools reach is re-exported
//! by `src/testkit.rs`, which is no layer and does nothing but re-export.
//!
//! Only the code the library is built from counts: comments, string literals and test code
//! (`#[cfg(test)]` items and the modules they declare) are left out before imports are read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layer table of `src/lib.rs`: each layer, top to bottom, with the layers it imports.
struct Table {
    layers: Vec<(String, BTreeSet<String>)>,
}

impl Table {
    /// Reads the ```text block of the crate docs whose first line is `layer imports`.
    fn parse(lib_rs: &str) -> Table {
        let docs: Vec<&str> = lib_rs
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .map(str::trim)
            .collect();
        let start = docs
            .iter()
            .position(|l| l.split_whitespace().eq(["layer", "imports"]))
            .expect("src/lib.rs has a `layer imports` table");
        let layers = docs[start + 1..]
            .iter()
            .take_while(|l| !l.starts_with("```"))
            .map(|l| {
                let mut words = l.split_whitespace().map(str::to_owned);
                let layer = words.next().expect("a layer name");
                let imports = words.filter(|w| w != "-").collect();
                (layer, imports)
            })
            .collect();
        Table { layers }
    }

    fn position(&self, layer: &str) -> Option<usize> {
        self.layers.iter().position(|(name, _)| name == layer)
    }

    fn names(&self) -> BTreeSet<String> {
        self.layers.iter().map(|(name, _)| name.clone()).collect()
    }
}

/// Every way the sources break the rules; empty when they hold.
fn violations(lib_rs: &str, files: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let table = Table::parse(lib_rs);
    let mut found = Vec::new();
    let declared: BTreeSet<String> = strip_code(lib_rs)
        .0
        .split(';')
        .filter_map(|item| {
            let item = item.trim();
            // Past the item's attributes (`#[doc(hidden)]`).
            let item = item.rsplit_once(']').map_or(item, |(_, rest)| rest.trim());
            item.strip_prefix("pub mod ")
        })
        .map(|name| name.trim().to_owned())
        .filter(|name| name != TESTKIT)
        .collect();
    if declared != table.names() {
        found.push(format!(
            "src/lib.rs declares the layers {declared:?} but its table lists {:?}",
            table.names()
        ));
    }
    for (index, (layer, imports)) in table.layers.iter().enumerate() {
        for import in imports {
            match table.position(import) {
                Some(at) if at > index => {}
                Some(_) => found.push(format!(
                    "the table lets {layer} import {import}, which is not below it"
                )),
                None => found.push(format!("the table names an unknown layer {import}")),
            }
        }
    }

    let test_only = test_only_files(files);
    let mut actual: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in files {
        if test_only.contains(path) {
            continue;
        }
        let module = module_path(path);
        let (code, _) = strip_code(text);
        let Some(layer) = module.first() else {
            if path.ends_with("main.rs") && !code.contains("compactd::cli::main") {
                found.push("src/main.rs must only call compactd::cli::main".into());
            }
            continue;
        };
        if layer == TESTKIT {
            // Not a layer: the tests' way in, below every layer's root. It only re-exports.
            for item in code.split(';').map(str::trim).filter(|i| !i.is_empty()) {
                if !item.starts_with("pub use crate::") {
                    found.push(format!(
                        "src/testkit.rs only re-exports (`pub use crate::…;`), but has `{item}`"
                    ));
                }
            }
            continue;
        }
        let imported = imported_layers(&module, &code, &table.names());
        for import in imported.iter().filter(|i| *i != layer) {
            actual
                .entry(layer.clone())
                .or_default()
                .insert(import.clone());
            let allowed = table
                .layers
                .iter()
                .find(|(name, _)| name == layer)
                .is_some_and(|(_, imports)| imports.contains(import));
            if !allowed {
                found.push(format!(
                    "{}: {layer} imports {import}, which the table in src/lib.rs does not allow",
                    path.display()
                ));
            }
        }
        if layer == "compaction" {
            for io in io_paths(&code) {
                found.push(format!(
                    "{}: compaction does no I/O, but uses {io}",
                    path.display()
                ));
            }
        }
    }
    found.extend(circles(files, &test_only));
    for (layer, imports) in &table.layers {
        let used = actual.get(layer).cloned().unwrap_or_default();
        for unused in imports.difference(&used) {
            found.push(format!(
                "the table in src/lib.rs says {layer} imports {unused}, but it does not: \
                 update the table"
            ));
        }
    }
    found
}

/// The module that re-exports, for the tests, benches, fuzz targets and `compactd-devtools`,
/// what no layer exports to the others (`src/testkit.rs`). It is not a layer.
const TESTKIT: &str = "testkit";

/// The names a layer's root re-exports (`pub use …;` in `src/<layer>/mod.rs` or
/// `src/<layer>.rs`) that no file of `src/` outside the layer uses, one line each; empty when
/// every re-export has a user. A use is the name as a word in a file's code, comments and
/// string literals left out; another layer's unit tests count (they are the crate's code), but
/// `src/testkit.rs` does not: it re-exports for outside the crate.
fn unused_reexports(lib_rs: &str, files: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let layers = Table::parse(lib_rs).names();
    // Each file's code with its layer (`None` for the crate root's files).
    let code: Vec<(Option<String>, String)> = files
        .iter()
        .filter(|(path, _)| module_path(path).first().map(String::as_str) != Some(TESTKIT))
        .map(|(path, text)| {
            let owner = module_path(path).first().cloned();
            (owner, without_comments_and_literals(text))
        })
        .collect();
    let mut found = Vec::new();
    for (path, text) in files {
        let module = module_path(path);
        let [layer] = module.as_slice() else {
            continue;
        };
        if !layers.contains(layer) {
            continue;
        }
        for name in reexported_names(&strip_code(text).0) {
            let used = code
                .iter()
                .filter(|(owner, _)| owner.as_ref() != Some(layer))
                .any(|(_, code)| contains_word(code, &name));
            if !used {
                found.push(format!(
                    "{}: {layer} re-exports {name}, which no file outside {layer} uses: drop \
                     it, or re-export it in src/testkit.rs if tests, benches, fuzzing or \
                     devtools need it",
                    path.display()
                ));
            }
        }
    }
    found
}

/// The names the `pub use …;` items of `code` bring in: each path's last segment, or its
/// `as` name (`self` and globs left out).
fn reexported_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("pub use ") {
        let starts_item = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || matches!(c, ';' | '}' | ']'));
        let body = &rest[at + "pub use ".len()..];
        let end = body.find(';').unwrap_or(body.len());
        if starts_item {
            for item in body[..end].split([',', '{', '}']) {
                let name = match item.split_once(" as ") {
                    Some((_, alias)) => alias.trim(),
                    None => item.trim().rsplit("::").next().unwrap_or_default(),
                };
                if !name.is_empty() && name != "self" && name != "*" && !name.ends_with(':') {
                    names.push(name.to_owned());
                }
            }
        }
        rest = &body[end..];
    }
    names
}

/// Whether `word` occurs in `code` as a whole identifier.
fn contains_word(code: &str, word: &str) -> bool {
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    code.match_indices(word).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| code.as_bytes()[i]);
        let after = code.as_bytes().get(at + word.len()).copied();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The files that import one another in a loop, one line a loop. A file's use of an enclosing
/// module (its folder's `mod.rs`, or the file that declares it) does not count: that module is
/// the folder's face, which hands its parts' names on and keeps what they share.
fn circles(files: &BTreeMap<PathBuf, String>, test_only: &BTreeSet<PathBuf>) -> Vec<String> {
    let modules: BTreeMap<Vec<String>, &PathBuf> = files
        .keys()
        .filter(|path| !test_only.contains(*path))
        .map(|path| (module_path(path), path))
        .collect();
    let mut edges: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
    for (module, path) in &modules {
        let (code, _) = strip_code(&files[*path]);
        for target in imported_modules(module, &code, &modules) {
            if !module.starts_with(&target) {
                edges.entry(*path).or_default().insert(modules[&target]);
            }
        }
    }
    loops(&edges)
        .into_iter()
        .map(|group| {
            let names: Vec<String> = group.iter().map(|p| p.display().to_string()).collect();
            format!("import circle: {}", names.join(", "))
        })
        .collect()
}

/// The modules of `modules` that `code` (of the module at `module`) names: the longest known
/// prefix of each `crate::`, `super::`, `self::` or child-module path, and of each path in a
/// `{…}` group.
fn imported_modules(
    module: &[String],
    code: &str,
    modules: &BTreeMap<Vec<String>, &PathBuf>,
) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    for (at, _) in code.char_indices() {
        if at > 0 && is_path_char(bytes[at - 1]) {
            continue;
        }
        let rest = &code[at..];
        let (base, tail) = if let Some(tail) = rest.strip_prefix("crate::") {
            (Vec::new(), tail)
        } else if let Some(tail) = rest.strip_prefix("self::") {
            (module.to_vec(), tail)
        } else if rest.starts_with("super::") {
            let mut base = module.to_vec();
            let mut tail = rest;
            while let Some(after) = tail.strip_prefix("super::") {
                base.pop();
                tail = after;
            }
            (base, tail)
        } else {
            // A bare path that starts with a child module's name.
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let mut child = module.to_vec();
            child.push(name.clone());
            if name.is_empty()
                || !rest[name.len()..].starts_with("::")
                || !modules.contains_key(&child)
            {
                continue;
            }
            (module.to_vec(), rest)
        };
        for path in use_tree(tail.as_bytes(), &mut 0) {
            let mut target = base.clone();
            for segment in path {
                target.push(segment);
                if !modules.contains_key(&target) {
                    target.pop();
                    break;
                }
            }
            if modules.contains_key(&target) && target != module {
                found.insert(target);
            }
        }
    }
    found
}

/// The paths of the use tree that starts `text` at `at` (`a::b`, `a::{b, c::{d, e}}`), each as
/// its segments; `at` ends after it.
fn use_tree(text: &[u8], at: &mut usize) -> Vec<Vec<String>> {
    let skip_space = |at: &mut usize| {
        while text.get(*at).is_some_and(u8::is_ascii_whitespace) {
            *at += 1;
        }
    };
    let mut prefix = Vec::new();
    loop {
        skip_space(at);
        if text.get(*at) == Some(&b'{') {
            *at += 1;
            let mut paths = Vec::new();
            loop {
                for path in use_tree(text, at) {
                    paths.push([prefix.clone(), path].concat());
                }
                // Past an `as name`, to the separator.
                while text.get(*at).is_some_and(|c| !matches!(c, b',' | b'}')) {
                    *at += 1;
                }
                match text.get(*at) {
                    Some(b',') => *at += 1,
                    Some(_) => {
                        *at += 1;
                        break;
                    }
                    None => break,
                }
            }
            return paths;
        }
        let start = *at;
        while text
            .get(*at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            *at += 1;
        }
        if *at == start {
            break;
        }
        prefix.push(String::from_utf8_lossy(&text[start..*at]).into_owned());
        skip_space(at);
        if !text[*at..].starts_with(b"::") {
            break;
        }
        *at += 2;
    }
    vec![prefix]
}

/// The groups of nodes that reach one another along `edges` (Tarjan's strongly connected
/// components), each of two nodes or more.
fn loops<'a>(edges: &BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>) -> Vec<Vec<&'a PathBuf>> {
    struct Walk<'a, 'e> {
        edges: &'e BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
        index: BTreeMap<&'a PathBuf, (usize, usize)>,
        stack: Vec<&'a PathBuf>,
        groups: Vec<Vec<&'a PathBuf>>,
    }
    impl<'a> Walk<'a, '_> {
        fn visit(&mut self, node: &'a PathBuf) -> usize {
            let order = self.index.len();
            self.index.insert(node, (order, order));
            self.stack.push(node);
            let mut low = order;
            for next in self.edges.get(node).into_iter().flatten() {
                match self.index.get(next) {
                    None => low = low.min(self.visit(next)),
                    Some(&(seen, _)) if self.stack.contains(next) => low = low.min(seen),
                    Some(_) => {}
                }
            }
            self.index.insert(node, (order, low));
            if low == order {
                let at = self.stack.iter().rposition(|n| *n == node).unwrap_or(0);
                let mut group = self.stack.split_off(at);
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
            low
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        groups: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.groups
}

/// The module path of a file under `src/` (`src/engine/compact.rs` → `engine::compact`;
/// `src/lib.rs` and `src/main.rs` → the crate root).
fn module_path(path: &Path) -> Vec<String> {
    let mut parts: Vec<String> = path
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
    }
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The files of modules declared under `#[cfg(test)]` (`mod tests;`), and every file below
/// them.
fn test_only_files(files: &BTreeMap<PathBuf, String>) -> BTreeSet<PathBuf> {
    let mut test_dirs = Vec::new();
    for (path, text) in files {
        let dir: PathBuf = module_path(path).iter().collect();
        for name in strip_code(text).1 {
            test_dirs.push(dir.join(&name));
        }
    }
    files
        .keys()
        .filter(|path| {
            test_dirs
                .iter()
                .any(|dir| path.with_extension("") == *dir || path.starts_with(dir))
        })
        .cloned()
        .collect()
}

/// The layers `code` (of the module at `module`) names: `crate::layer` paths, groups
/// (`crate::{a, b}`), and `super::` paths that climb to the crate root.
fn imported_layers(module: &[String], code: &str, layers: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let starts_path = at == 0 || !is_path_char(bytes[at - 1]);
        let rest = &code[at..];
        let root = if !starts_path {
            None
        } else if let Some(after) = rest.strip_prefix("crate::") {
            Some(after)
        } else if rest.starts_with("super::") {
            let mut climbs = 0;
            let mut tail = rest;
            while let Some(after) = tail.strip_prefix("super::") {
                climbs += 1;
                tail = after;
            }
            // Only a path that climbs out of the layer names another layer.
            (climbs >= module.len()).then_some(tail)
        } else {
            None
        };
        if let Some(root) = root {
            for name in first_segments(root) {
                if layers.contains(&name) {
                    found.insert(name);
                }
            }
        }
        at += rest.chars().next().map_or(1, char::len_utf8);
    }
    found
}

fn is_path_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':' || b == b'$'
}

/// The first segment of the path that starts `text`, or of each path in a `{…}` group.
fn first_segments(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = text.strip_prefix('{') else {
        return vec![ident(text)];
    };
    let mut depth = 0;
    let mut segments = vec![ident(group)];
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => segments.push(ident(&group[i + 1..])),
            _ => {}
        }
    }
    segments
}

/// The I/O `code` reaches for: the file system, network, processes, the environment, the
/// clock, threads or an async runtime.
fn io_paths(code: &str) -> Vec<&'static str> {
    const IO: &[&str] = &[
        "std::fs",
        "std::io",
        "std::net",
        "std::process",
        "std::env",
        "std::thread",
        "std::time",
        "SystemTime",
        "Instant",
        "tokio",
        "reqwest",
        "File::",
    ];
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    IO.iter()
        .copied()
        .filter(|needle| {
            code.match_indices(needle).any(|(at, _)| {
                let before = at.checked_sub(1).map(|i| code.as_bytes()[i]);
                let after = code.as_bytes().get(at + needle.len()).copied();
                !before.is_some_and(|b| is_ident(b) || b == b':')
                    && !after.is_some_and(|b| is_ident(b) && !needle.ends_with(':'))
            })
        })
        .collect()
}

/// `text` without comments, with string and character literals emptied and `#[cfg(test)]`
/// items removed; and the names of the modules those items declare (`mod tests;`).
fn strip_code(text: &str) -> (String, Vec<String>) {
    let code = without_comments_and_literals(text);
    let mut out = String::with_capacity(code.len());
    let mut test_modules = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let end = item_end(item);
        let words: Vec<&str> = item[..end]
            .split(|c: char| c.is_whitespace() || c == ';')
            .filter(|w| !w.is_empty())
            .collect();
        if let [.., "mod", name] = words.as_slice() {
            test_modules.push((*name).to_owned());
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, test_modules)
}

/// Where the item that starts `text` ends: after its `;`, or after the `}` that closes its
/// first `{`.
fn item_end(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            ';' if depth == 0 => return i + 1,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// `text` with comments removed and the contents of string and character literals dropped,
/// so neither a doc comment nor a string that mentions `crate::x` counts as an import.
fn without_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            }
            'r' | 'b' if raw_string_start(&chars, i).is_some() => {
                let (hashes, body) = raw_string_start(&chars, i).unwrap_or_default();
                i = body;
                while i < chars.len() {
                    if chars[i] == '"' && (1..=hashes).all(|h| chars.get(i + h) == Some(&'#')) {
                        i += hashes + 1;
                        break;
                    }
                    i += 1;
                }
                out.push_str("\"\"");
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            '\'' if next == Some('\\') => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            }
            '\'' if chars.get(i + 2) == Some(&'\'') => {
                i += 3;
                out.push_str("' '");
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// At a raw string literal (`r"`, `r#"`, `br#"`, not inside an identifier): its number of `#`
/// and where its body starts.
fn raw_string_start(chars: &[char], at: usize) -> Option<(usize, usize)> {
    if at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_') {
        return None;
    }
    let mut i = at;
    if chars[i] == 'b' {
        i += 1;
    }
    if chars.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = chars[i..].iter().take_while(|c| **c == '#').count();
    (chars.get(i + hashes) == Some(&'"')).then_some((hashes, i + hashes + 1))
}

/// Every `.rs` file under `src/`, by its path relative to `src/`.
fn sources() -> BTreeMap<PathBuf, String> {
    let src = devtools::fixtures::repo_file("src");
    let mut files = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let relative = path.strip_prefix(&src).expect("under src/").to_path_buf();
                files.insert(relative, text);
            }
        }
    }
    files
}

#[test]
fn the_sources_keep_the_layer_rules_of_src_lib_rs() {
    let files = sources();
    let lib_rs = &files[Path::new("lib.rs")];
    let found = violations(lib_rs, &files);
    assert!(
        found.is_empty(),
        "layer rules broken:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_layer_root_re_exports_only_what_other_layers_use() {
    let files = sources();
    let found = unused_reexports(&files[Path::new("lib.rs")], &files);
    assert!(
        found.is_empty(),
        "re-exports no other layer uses:\n{}",
        found.join("\n")
    );
}

/// Appends `line` to the source file `path` (relative to `src/`) of `files`.
fn plant(files: &mut BTreeMap<PathBuf, String>, path: &str, line: &str) {
    let text = files.get_mut(Path::new(path)).expect("the file exists");
    text.push_str(line);
}

/// The re-export check itself: a planted re-export that only `src/testkit.rs`, a comment or a
/// string names is reported; one that another layer's code or unit tests use is not.
#[test]
fn planted_unused_re_exports_are_reported() {
    let mut files = sources();
    let lib_rs = files[Path::new("lib.rs")].clone();
    plant(
        &mut files,
        "compaction/mod.rs",
        "\npub use cut_point::{find_cut_point, find_turn_start_index as turn_start};\n",
    );
    plant(
        &mut files,
        "testkit.rs",
        "\npub use crate::compaction::cut_point::find_cut_point;\n",
    );
    plant(
        &mut files,
        "engine/compact.rs",
        "\n// find_cut_point turn_start\nconst _: &str = \"find_cut_point turn_start\";\n",
    );
    let found = unused_reexports(&lib_rs, &files);
    for name in ["find_cut_point", "turn_start"] {
        assert!(
            found.iter().any(|f| f.starts_with(&format!(
                "compaction/mod.rs: compaction re-exports {name}, "
            ))),
            "{name} not reported in {found:#?}"
        );
    }
    assert_eq!(found.len(), 2, "{found:#?}");

    plant(
        &mut files,
        "engine/compact.rs",
        "\n#[cfg(test)]\nfn planted() { crate::compaction::turn_start(); }\n",
    );
    let found = unused_reexports(&lib_rs, &files);
    assert_eq!(found.len(), 1, "{found:#?}");
}

/// The checker itself: the real sources with violations planted in them fail, each named.
#[test]
fn planted_violations_are_each_reported() {
    let mut files = sources();
    let lib_rs = files[Path::new("lib.rs")].clone();
    // The engine sees a wire type, in a path inside a `use` group.
    plant(
        &mut files,
        "engine/compact.rs",
        "\nuse crate::{protocol::CompactResult, session::Entry};\n",
    );
    // Compaction reads a file.
    plant(
        &mut files,
        "compaction/prune.rs",
        "\nfn read() -> String { std::fs::read_to_string(\"x\").unwrap() }\n",
    );
    // The transport reaches the domain by climbing out of its module.
    plant(
        &mut files,
        "rpc/peer.rs",
        "\nfn domain(_: &super::super::session::Entry) {}\n",
    );
    // Two files of one layer import each other, by a plain path and inside a group.
    plant(
        &mut files,
        "summarize/fit.rs",
        "\nuse super::ladder::write_summary;\n",
    );
    plant(
        &mut files,
        "engine/background/run.rs",
        "\nuse crate::engine::{events::Phase, state::SessionState as S};\n",
    );
    // Test code and comments may say anything.
    plant(
        &mut files,
        "session/tree.rs",
        "\n// crate::engine\n#[cfg(test)]\nmod planted { use crate::engine::Engine; }\n",
    );
    let found = violations(&lib_rs, &files);
    let expect = [
        "engine/compact.rs: engine imports protocol",
        "compaction/prune.rs: compaction does no I/O, but uses std::fs",
        "rpc/peer.rs: rpc imports session",
        "import circle: summarize/fit.rs, summarize/ladder.rs",
        "import circle: engine/background/run.rs, engine/state.rs",
    ];
    for expected in expect {
        assert!(
            found.iter().any(|f| f.starts_with(expected)),
            "{expected:?} not reported in {found:#?}"
        );
    }
    assert_eq!(found.len(), expect.len(), "{found:#?}");

    // A table that lets a layer import one above it, or names an import that is not there.
    let upward = lib_rs.replace(
        "//! tokens       session",
        "//! tokens       session engine",
    );
    let found = violations(&upward, &sources());
    assert!(
        found
            .iter()
            .any(|f| f == "the table lets tokens import engine, which is not below it"),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("the table in src/lib.rs says tokens imports engine")),
        "{found:#?}"
    );
}
