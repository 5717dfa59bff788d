//! Compacting a transcript from outside: Claude Code's own two records, appended.
//!
//! A compaction is a `system` line with `subtype: "compact_boundary"` (`parentUuid: null`,
//! `logicalParentUuid` the last line) and a `user` line with `isCompactSummary: true` whose
//! text is the summary. Claude Code, resuming the session, sends the summary and what follows
//! it, no longer the older turns. The verbatim tail (the turns compactd keeps) is appended
//! after the summary as copies of their lines, with new uuids chained on it, each naming the
//! line it copies (`compactdKeptFrom`, a field Claude Code ignores) so that compactd reads the
//! copies back as the kept part of its compaction, not as new messages.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use super::read::KEPT_FROM;
use super::{ClaudeError, SUMMARY_PREAMBLE, Transcript};
use crate::foreign::in_use::{QUIET_FOR, holder, written_lately};
use crate::session::ids::{now_iso, random_u64};

/// Refuses a transcript that Claude Code may be writing now: one that another process has
/// open (Linux: `/proc/*/fd`), or that was modified less than five seconds ago
/// (`foreign::in_use`).
pub fn ensure_quiet(path: &Path) -> Result<(), ClaudeError> {
    let busy = |why: String| ClaudeError::Busy {
        path: path.display().to_string(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|source| ClaudeError::Io {
        path: path.display().to_string(),
        source,
    })?;
    if let Some(age) = meta.modified().ok().and_then(written_lately) {
        return Err(busy(format!(
            "it was written {:.1} s ago, less than {} s",
            age.as_secs_f64(),
            QUIET_FOR.as_secs()
        )));
    }
    if let Some(pid) = holder(path) {
        return Err(busy(format!("process {pid} has it open")));
    }
    Ok(())
}

/// A new line uuid (version 4 form).
fn new_uuid() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// The lines that compact `transcript` with `summary`: the boundary, the summary, then copies
/// of the kept lines (`kept`: uuids of `user`/`assistant` lines, oldest first), each a JSON
/// text without its newline.
pub fn compaction_lines(
    transcript: &Transcript,
    summary: &str,
    tokens_before: u64,
    kept: &[String],
) -> Vec<String> {
    let now = now_iso();
    let common = |uuid: &str, parent: Option<&str>| {
        let mut line = json!({"parentUuid": parent, "isSidechain": false,
            "userType": "external", "cwd": transcript.cwd, "sessionId": transcript.session_id,
            "uuid": uuid, "timestamp": now});
        if let Some(version) = &transcript.version {
            line["version"] = json!(version);
        }
        if let Some(branch) = &transcript.git_branch {
            line["gitBranch"] = json!(branch);
        }
        line
    };
    let boundary_id = new_uuid();
    let mut boundary = common(&boundary_id, None);
    boundary["logicalParentUuid"] = json!(transcript.last_uuid);
    boundary["type"] = json!("system");
    boundary["subtype"] = json!("compact_boundary");
    boundary["content"] = json!("Conversation compacted");
    boundary["isMeta"] = json!(false);
    boundary["level"] = json!("info");
    boundary["compactMetadata"] = json!({"trigger": "manual", "preTokens": tokens_before});
    let summary_id = new_uuid();
    let mut summary_line = common(&summary_id, Some(&boundary_id));
    summary_line["type"] = json!("user");
    summary_line["message"] =
        json!({"role": "user", "content": format!("{SUMMARY_PREAMBLE}{summary}")});
    summary_line["isVisibleInTranscriptOnly"] = json!(true);
    summary_line["isCompactSummary"] = json!(true);
    let mut lines = vec![boundary.to_string(), summary_line.to_string()];
    let mut parent = summary_id;
    for uuid in kept {
        let Some(Value::Object(original)) = transcript.lines.get(uuid) else {
            continue;
        };
        let mut copy = original.clone();
        let id = new_uuid();
        copy.insert("uuid".to_owned(), json!(id));
        copy.insert("parentUuid".to_owned(), json!(parent));
        copy.insert(KEPT_FROM.to_owned(), json!(uuid));
        // Claude Code joins the assistant lines that share a message id wherever they are:
        // the copy gets its own, or the original's content would come back with it.
        if let Some(Value::String(message_id)) =
            copy.get_mut("message").and_then(|m| m.get_mut("id"))
        {
            message_id.push_str(&format!("_kept_{}", &id[..8]));
        }
        lines.push(Value::Object(copy).to_string());
        parent = id;
    }
    lines
}

/// Appends `lines` to the transcript at `path`, if it is still `read_len` bytes long (else
/// nothing is written). The existing bytes are never touched; a file that does not end in a
/// newline gets one first, so no line is glued to a torn one.
pub fn append(path: &Path, read_len: u64, lines: &[String]) -> Result<(), ClaudeError> {
    let io = |source| ClaudeError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .read(true)
        .open(path)
        .map_err(io)?;
    file.lock().map_err(io)?;
    let now = file.metadata().map_err(io)?.len();
    if now != read_len {
        return Err(ClaudeError::Changed {
            path: path.display().to_string(),
            read: read_len,
            now,
        });
    }
    let mut text = String::new();
    if now > 0 && !ends_with_newline(&mut file).map_err(io)? {
        text.push('\n');
    }
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_data().map_err(io)
}

fn ends_with_newline(file: &mut std::fs::File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}
