//! The file-system edges: one file under two names, rewrites through a symlink, and paths
//! that are not regular files.

use std::os::unix::fs::{FileTypeExt, symlink};
use std::sync::mpsc;
use std::time::Duration;

use pretty_assertions::assert_eq;

use super::*;

/// Runs `f` on a thread and fails the test if it has not returned within 10 s (instead of
/// hanging the test run when a regression makes it block).
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("returned within 10 s instead of blocking")
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn two_names_of_one_file_share_its_lock_and_never_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let real = new_session(&dir).path().to_path_buf();
    let link_dir = tempfile::tempdir().unwrap();
    let link = link_dir.path().join("link.jsonl");
    symlink(&real, &link).unwrap();
    let workers: Vec<_> = [real.clone(), link.clone()]
        .into_iter()
        .enumerate()
        .map(|(w, name)| {
            std::thread::spawn(move || {
                let (mut s, _) = Session::open(&name).unwrap();
                for i in 0..100 {
                    s.append(user(&format!("w{w} {i} {}", "x".repeat(i * 50))))
                        .unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_valid_file(&real);
    let (s, _) = Session::open(&real).unwrap();
    assert_eq!(s.entries().len(), 200);
    for pair in s.entries().windows(2) {
        assert_eq!(
            pair[1].parent_id.as_deref(),
            Some(pair[0].id.as_str()),
            "one chain"
        );
    }
    // The lock lives next to the file, not next to the name it was opened by.
    assert!(names_in(dir.path()).contains(&".s.jsonl.lock".to_owned()));
    assert_eq!(names_in(link_dir.path()), ["link.jsonl"]);
}

#[test]
fn a_rewrite_through_a_symlink_rewrites_the_target_and_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let real = fixture(&dir, "v1.jsonl");
    let link = dir.path().join("link.jsonl");
    symlink(&real, &link).unwrap();
    let (mut s, report) = Session::open(&link).unwrap();
    assert_eq!(report.migrated_from, Some(1));
    assert_eq!(
        s.path(),
        link,
        "the session keeps the name it was opened by"
    );
    s.append(user("after the migration")).unwrap();
    assert!(
        fs::symlink_metadata(&link).unwrap().is_symlink(),
        "still a link"
    );
    assert_eq!(fs::read_link(&link).unwrap(), real);
    let text = fs::read_to_string(&real).unwrap();
    assert!(text.starts_with("{\"type\":\"session\",\"version\":3,"));
    assert!(text.contains("after the migration"));
    // A prune-style rewrite too, and the next append lands in the same file.
    s.replace_entries(|entries| entries.truncate(entries.len() - 1))
        .unwrap();
    s.append(user("after the rewrite")).unwrap();
    assert!(fs::symlink_metadata(&link).unwrap().is_symlink());
    let (again, _) = Session::open(&real).unwrap();
    assert_eq!(again.entries(), s.entries());
    assert!(
        fs::read_to_string(&real)
            .unwrap()
            .contains("after the rewrite")
    );
    assert!(!names_in(dir.path()).iter().any(|n| n.ends_with(".tmp")));
}

#[test]
fn a_fifo_or_a_directory_named_like_a_session_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("x.jsonl");
    mkfifo(&fifo);
    let folder = dir.path().join("d.jsonl");
    fs::create_dir(&folder).unwrap();
    for (path, kind) in [(fifo.clone(), "FIFO"), (folder, "directory")] {
        let err = within_10s(move || Session::open(path).map(drop)).unwrap_err();
        assert!(
            matches!(err, SessionError::NotRegularFile { kind: k, .. } if k == kind),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("is a {kind}")), "{err}");
    }
    // A symlink to a FIFO is the FIFO.
    let link = dir.path().join("link.jsonl");
    symlink(&fifo, &link).unwrap();
    let err = within_10s(move || Session::open(link).map(drop)).unwrap_err();
    assert!(matches!(err, SessionError::NotRegularFile { .. }), "{err}");
}

#[test]
fn a_fifo_swapped_in_under_an_open_session_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_session(&dir);
    s.append(user("before")).unwrap();
    let path = s.path().to_path_buf();
    fs::remove_file(&path).unwrap();
    mkfifo(&path);
    let (refreshed, appended) = within_10s(move || {
        let mut s = s;
        (s.refresh().map(drop), s.append(user("after")).map(drop))
    });
    for err in [refreshed.unwrap_err(), appended.unwrap_err()] {
        assert!(matches!(err, SessionError::NotRegularFile { .. }), "{err}");
    }
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_fifo());
    // The lock sidecar cannot block either, whatever it is.
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_session(&dir);
    mkfifo(&dir.path().join(".s.jsonl.lock"));
    let err = within_10s(move || s.append(user("x")).map(drop)).unwrap_err();
    assert!(matches!(err, SessionError::NotRegularFile { .. }), "{err}");
}
