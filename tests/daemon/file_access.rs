//! The daemon touches no file outside its config and data directories, the session files the
//! client names, and the read-only parts of the system a process needs (issue 6, item 6).
//!
//! The real binary runs under `strace -f`, which records every file-related system call of
//! every thread; the test drives it through create, open by path, append, context, compaction,
//! prune, navigation with a summary, listing and a settings update, then checks each path in
//! the trace. compactd keeps no cache directory: token counts are cached in memory only.

use std::path::{Path, PathBuf};

use devtools::daemon::{DaemonProcess, SpawnOptions, conversation, user};
use serde_json::json;

/// System places a process may read: the dynamic loader and libraries, `/proc` and `/sys`
/// about itself and the machine, `/dev/null` and random devices, and `/etc` files such as
/// `ld.so.cache` and `localtime`.
const SYSTEM_READ_ONLY: &[&str] = &["/etc/", "/lib/", "/lib64/", "/usr/", "/proc/", "/sys/"];
const DEVICES: &[&str] = &["/dev/null", "/dev/urandom", "/dev/random"];

/// Syscalls that create, change or remove a file (an `open*` counts when its flags write).
const WRITING_CALLS: &[&str] = &[
    "mkdir",
    "mkdirat",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "rmdir",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "chmod",
    "fchmodat",
    "truncate",
    "creat",
    "utimensat",
];

struct Access {
    call: String,
    path: String,
    writes: bool,
    line: String,
}

/// Every quoted path argument of every traced call; `strace -s` keeps them whole.
fn accesses(trace: &str) -> Vec<Access> {
    let mut out = Vec::new();
    for line in trace.lines() {
        // `<pid> <call>(<args>) = <result>`; skip signals, exits and resumed halves.
        let Some(rest) = line.split_once(' ').map(|(_, r)| r.trim_start()) else {
            continue;
        };
        let Some((call, args)) = rest.split_once('(') else {
            continue;
        };
        if !call.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || call == "execve" {
            continue;
        }
        let writes = WRITING_CALLS.contains(&call)
            || (call.starts_with("open")
                && ["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC"]
                    .iter()
                    .any(|f| args.contains(f)));
        let mut parts = args.split('"');
        parts.next();
        while let (Some(path), Some(_)) = (parts.next(), parts.next()) {
            out.push(Access {
                call: call.to_owned(),
                path: path.to_owned(),
                writes,
                line: line.to_owned(),
            });
        }
    }
    out
}

fn under(path: &str, root: &Path) -> bool {
    Path::new(path).starts_with(root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_touches_only_its_dirs_and_the_files_it_is_given() {
    let scratch = tempfile::tempdir().unwrap();
    let trace_path = scratch.path().join("trace.txt");
    let elsewhere = scratch.path().join("client-named");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let settings = json!({
        "tokenizer": "chars4",
        "compaction": {"enabled": false, "keepRecentTokens": 200},
    });
    let mut d = DaemonProcess::spawn_opts(SpawnOptions {
        settings: Some(settings),
        wrapper: vec![
            "strace".into(),
            // cargo's library path for the test makes the loader probe the toolchain.
            "-E".into(),
            "LD_LIBRARY_PATH".into(),
            "-f".into(),
            "-qq".into(),
            "-s".into(),
            "4096".into(),
            "-e".into(),
            "trace=%file".into(),
            "-o".into(),
            trace_path.to_string_lossy().into_owned(),
        ],
        ..SpawnOptions::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;

    let home = d.home.path().to_path_buf();
    let config = home.join("config");
    let data = home.join("data");
    let project = d.project();

    let s = d.create_session().await;
    d.ok(
        "session/append",
        json!({"sessionId": s, "entries": conversation(8, 60)}),
    )
    .await;
    d.ok("session/context", json!({"sessionId": s})).await;
    let compacted = d.ok("session/compact", json!({"sessionId": s})).await;
    assert!(compacted["summary"].is_string(), "{compacted}");
    d.ok("session/prune", json!({"sessionId": s, "dryRun": true}))
        .await;
    let tree = d.ok("session/tree", json!({"sessionId": s})).await;
    let first = tree["nodes"][0]["id"].as_str().unwrap().to_owned();
    d.ok(
        "session/navigateTree",
        json!({"sessionId": s, "targetId": first, "summarize": true}),
    )
    .await;

    // A session at a path the client names, outside the data directory.
    let named: PathBuf = elsewhere.join("named.jsonl");
    let info = d
        .ok("session/create", json!({"cwd": project, "path": named}))
        .await;
    let other = info["sessionId"].as_str().unwrap().to_owned();
    d.ok(
        "session/append",
        json!({"sessionId": other, "entries": [user("hello")]}),
    )
    .await;
    d.ok("session/close", json!({"sessionId": other})).await;
    d.ok("session/open", json!({"path": named})).await;
    d.ok("session/list", json!({})).await;
    d.ok("session/list", json!({"cwd": project})).await;
    d.ok(
        "settings/update",
        json!({"patch": {"compaction": {"reserveTokens": 9000}}, "target": "user"}),
    )
    .await;
    d.ok("settings/get", json!({"sessionId": s})).await;
    d.drain_buffer();
    d.finish().await;

    let trace = std::fs::read_to_string(&trace_path).expect("strace wrote its trace");
    let all = accesses(&trace);
    assert!(
        all.iter().any(|a| a.writes && under(&a.path, &data)),
        "the trace records the session writes:\n{trace}"
    );
    assert!(
        all.iter()
            .any(|a| a.writes && a.path == named.to_string_lossy()),
        "the trace records the client-named file"
    );

    let writable = [&config, &data, &elsewhere];
    // The project's `.compactd/settings.json` is read, never written.
    let readable = [&config, &data, &elsewhere, &project];
    let mut bad = Vec::new();
    for a in &all {
        let p = a.path.as_str();
        let ok = if a.writes {
            writable.iter().any(|r| under(p, r)) || p == "/dev/null"
        } else {
            readable.iter().any(|r| under(p, r))
                // Creating or canonicalising a directory stats and reads links of its parents.
                || ((a.call.contains("stat") || a.call == "readlink")
                    && readable.iter().any(|r| r.starts_with(p)))
                || SYSTEM_READ_ONLY.iter().any(|prefix| p.starts_with(prefix))
                || DEVICES.contains(&p)
        };
        if !ok {
            bad.push(a.line.clone());
        }
    }
    assert!(
        bad.is_empty(),
        "file accesses outside the allowed places:\n{}",
        bad.join("\n")
    );
}

/// `storage.sync` changed by `settings/update` applies to a session that is already open: the
/// trace shows no `fdatasync` of the session file while it is `os`, and one per append after
/// it becomes `fsync`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_sync_update_applies_to_open_sessions() {
    let scratch = tempfile::tempdir().unwrap();
    let trace_path = scratch.path().join("sync.txt");
    let mut d = DaemonProcess::spawn_opts(SpawnOptions {
        settings: Some(json!({"storage": {"sync": "os"}})),
        wrapper: [
            "strace",
            "-E",
            "LD_LIBRARY_PATH",
            "-f",
            "-qq",
            "-y",
            "-e",
            "trace=fsync,fdatasync",
            "-o",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([trace_path.to_string_lossy().into_owned()])
        .collect(),
        ..SpawnOptions::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let s = info["sessionId"].as_str().unwrap().to_owned();
    let file = info["path"].as_str().unwrap().to_owned();
    let syncs_of_file = |trace: &str| {
        trace
            .lines()
            .filter(|l| l.contains(&format!("<{file}>")))
            .count()
    };
    for i in 0..3 {
        d.ok(
            "session/append",
            json!({"sessionId": s, "entries": [user(&format!("os {i}"))]}),
        )
        .await;
    }
    d.ok(
        "settings/update",
        json!({"patch": {"storage": {"sync": "fsync"}}, "target": "user"}),
    )
    .await;
    for i in 0..3 {
        d.ok(
            "session/append",
            json!({"sessionId": s, "entries": [user(&format!("fsync {i}"))]}),
        )
        .await;
    }
    d.drain_buffer();
    d.finish().await;
    let trace = std::fs::read_to_string(&trace_path).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    // Appends made while `os` left no sync; the three after the update each synced the file.
    assert_eq!(syncs_of_file(&trace), 3, "{}", lines.join("\n"));
}
