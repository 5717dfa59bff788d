//! `settings`: arbitrary bytes as the user settings file, loaded through [`SettingsStack`].
//!
//! Invariants: loading never panics; a file that loads gives effective settings and an
//! explanation of every key; an error names the file and either the key path of the bad value
//! or where the syntax went wrong (line and column), so a person can find it.

use std::cell::RefCell;
use std::fs;
use std::path::PathBuf;

use compactd::settings::{SettingsError, SettingsStack};
use tempfile::TempDir;

thread_local! {
    /// One directory for the whole fuzzing process: creating one per input would dominate.
    static DIR: RefCell<Option<TempDir>> = const { RefCell::new(None) };
}

fn settings_file() -> PathBuf {
    DIR.with(|dir| {
        dir.borrow_mut()
            .get_or_insert_with(|| tempfile::tempdir().expect("a temp dir can be created"))
            .path()
            .join("settings.json")
    })
}

pub fn check(data: &[u8]) {
    let file = settings_file();
    fs::write(&file, data).expect("the temp file can be written");
    match SettingsStack::load(Some(&file), None) {
        Ok(stack) => {
            stack
                .effective()
                .expect("a loaded stack has valid effective settings");
            assert!(!stack.explain().is_empty(), "every key can be explained");
        }
        Err(error) => check_error(&error, &file.display().to_string()),
    }
}

fn check_error(error: &SettingsError, file: &str) {
    let text = error.to_string();
    assert!(
        text.contains(file),
        "the error does not name the file: {text}"
    );
    match error {
        SettingsError::Syntax { message, .. } => assert!(
            has_location(message) || message == "settings must be a JSON object",
            "a syntax error without its line and column: {text}"
        ),
        SettingsError::Invalid { key, message, .. } => assert!(
            key != "(top level)" || message.contains('`'),
            "an invalid value without its key: {text}"
        ),
        other => panic!(
            "a file that exists and was written should not fail this way: {text} ({other:?})"
        ),
    }
}

/// serde_json's "... at line L column C".
fn has_location(message: &str) -> bool {
    message.contains(" at line ") && message.contains(" column ")
}
