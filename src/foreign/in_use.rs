//! Whether an agent is writing its session file right now: another process holds it open, or
//! it was written a moment ago. compactd refuses such a file rather than race the agent; each
//! agent's module says so in its own words.

use std::path::Path;
use std::time::{Duration, SystemTime};

/// A file written less than this long ago may be in the middle of a turn.
pub const QUIET_FOR: Duration = Duration::from_secs(5);

/// How long ago a file last modified at `modified` was written, when that is less than
/// [`QUIET_FOR`].
pub fn written_lately(modified: SystemTime) -> Option<Duration> {
    let age = SystemTime::now()
        .duration_since(modified)
        .unwrap_or_default();
    (age < QUIET_FOR).then_some(age)
}

/// The id of another process with `path` open, found in `/proc/*/fd` (Linux; elsewhere none).
pub fn holder(path: &Path) -> Option<u32> {
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
