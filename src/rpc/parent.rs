//! Watching the parent process, so the daemon exits when the editor or agent that spawned it
//! dies without closing our stdin (LSP `initialize.processId`).

use std::path::Path;
use std::time::Duration;

/// Resolves once process `pid` no longer runs, checking every `poll`.
///
/// On Linux this reads `/proc/<pid>/stat` (a zombie counts as exited). Elsewhere on Unix it
/// asks `kill -0 <pid>`. Where neither is available it never resolves and logs a warning.
pub async fn wait_for_process_exit(pid: u32, poll: Duration) {
    loop {
        match process_is_alive(pid).await {
            Some(true) => tokio::time::sleep(poll).await,
            Some(false) => return,
            None => {
                tracing::warn!(pid, "cannot watch a process on this platform");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// `None` when this platform offers no way to tell.
async fn process_is_alive(pid: u32) -> Option<bool> {
    if Path::new("/proc/self/stat").exists() {
        return Some(
            match tokio::fs::read_to_string(format!("/proc/{pid}/stat")).await {
                // The state letter follows the command name, which is in parentheses and may
                // itself contain spaces or parentheses.
                Ok(stat) => stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
                    .is_none_or(|state| state != 'Z' && state != 'X'),
                Err(_) => false,
            },
        );
    }
    if cfg!(unix) {
        let status = tokio::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await
            .ok()?;
        return Some(status.success());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reaped_child_counts_as_exited_and_we_are_alive() {
        let mut child = tokio::process::Command::new("true")
            .spawn()
            .expect("`true` exists on every Unix");
        let pid = child.id().expect("the child has not been waited for yet");
        child.wait().await.expect("waiting for `true` succeeds");
        tokio::time::timeout(
            Duration::from_secs(5),
            wait_for_process_exit(pid, Duration::from_millis(10)),
        )
        .await
        .expect("an exited process is noticed");
        assert_eq!(process_is_alive(std::process::id()).await, Some(true));
    }
}
