//! Whether Codex is writing a rollout right now (`foreign::in_use`), in Codex's words.

use std::path::Path;

use crate::foreign::in_use::{QUIET_FOR, holder, written_lately};

/// Why `path` looks written right now, or `None` when it is quiet.
pub fn being_written(path: &Path) -> Option<String> {
    if let Some(pid) = holder(path) {
        return Some(format!(
            "process {pid} has it open (is Codex running this session?); compact it after the agent exits"
        ));
    }
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    written_lately(modified).map(|age| {
        format!(
            "it was written {:.1} s ago (Codex may be in a turn); try again when it has been quiet for {} s",
            age.as_secs_f64(),
            QUIET_FOR.as_secs()
        )
    })
}
