//! Whether Codex is writing a rollout right now: another process holds it open, or it was
//! written a moment ago. compactd refuses such a file rather than race the agent.

use std::path::Path;
use std::time::{Duration, SystemTime};

/// A file written less than this long ago may be in the middle of a turn.
pub const QUIET_FOR: Duration = Duration::from_secs(5);

/// Why `path` looks written right now, or `None` when it is quiet.
pub fn being_written(path: &Path) -> Option<String> {
    if let Some(pid) = holder(path) {
        return Some(format!(
            "process {pid} has it open (is Codex running this session?); compact it after the agent exits"
        ));
    }
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    let age = SystemTime::now()
        .duration_since(modified)
        .unwrap_or_default();
    (age < QUIET_FOR).then(|| {
        format!(
            "it was written {:.1} s ago (Codex may be in a turn); try again when it has been quiet for {} s",
            age.as_secs_f64(),
            QUIET_FOR.as_secs()
        )
    })
}

/// The id of another process with `path` open, found in `/proc/*/fd` (Linux; elsewhere none).
fn holder(path: &Path) -> Option<u32> {
    let target = std::fs::canonicalize(path).ok()?;
    let me = std::process::id();
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc_entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link == target))
        {
            return Some(pid);
        }
    }
    None
}
