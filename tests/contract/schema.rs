//! The JSON Schemas in `schema/` are generated from the Rust types; this test fails when
//! they are stale, so a protocol change always shows up as a fixture diff.

use std::collections::BTreeSet;

use compactd::testkit::{protocol_schemas, schema_file_text};

const REGENERATE: &str = "run `cargo run -- schema --out schema` and commit the result";

#[test]
fn checked_in_schemas_match_the_rust_types() {
    let dir = devtools::fixtures::repo_file("schema");
    let generated = protocol_schemas();
    let mut problems = Vec::new();
    for (name, value) in &generated {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            // CRLF checkouts (Windows) must not count as a difference.
            Ok(text) if text.replace("\r\n", "\n") == schema_file_text(value) => {}
            Ok(_) => problems.push(format!("schema/{name} is stale")),
            Err(e) => problems.push(format!("schema/{name} cannot be read: {e}")),
        }
    }
    let expected: BTreeSet<&str> = generated.iter().map(|(name, _)| name.as_str()).collect();
    let entries = std::fs::read_dir(&dir).expect("schema/ exists in the repository");
    for entry in entries {
        let name = entry.expect("schema/ is listable").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".json") && !expected.contains(name.as_ref()) {
            problems.push(format!("schema/{name} is no longer generated: delete it"));
        }
    }
    assert!(problems.is_empty(), "{}\n{REGENERATE}", problems.join("\n"));
}

#[test]
fn regenerating_into_a_directory_is_deterministic() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let written = compactd::protocol::write_schemas(dir.path()).expect("schemas are written");
    assert_eq!(written.len(), protocol_schemas().len());
    for path in written {
        let text = std::fs::read_to_string(&path).expect("written file is readable");
        let name = path
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        let again = protocol_schemas()
            .into_iter()
            .find(|(n, _)| *n == name)
            .expect("every written file is generated");
        assert_eq!(
            text,
            schema_file_text(&again.1),
            "{name} differs between two runs"
        );
    }
}
