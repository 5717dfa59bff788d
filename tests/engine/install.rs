//! What a new user meets first: `--version` with the commit, shell completions and man pages
//! generated from the CLI definition, the notice of a daemon started in a terminal, and the
//! demo's output naming the file it wrote.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");

fn run(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "compactd {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 on stdout")
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git runs (the tests run in a checkout)");
    assert!(git.status.success(), "not a git checkout");
    let head = String::from_utf8(git.stdout).unwrap().trim().to_owned();
    let version = stdout(&run(&["--version"]));
    assert_eq!(
        version.trim(),
        format!("compactd {} (commit {head})", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn completions_cover_every_command_in_each_shell() {
    let commands = [
        "serve",
        "compact",
        "navigate",
        "context",
        "tree",
        "plan",
        "prune",
        "fork",
        "schema",
        "completions",
        "man",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&run(&["completions", shell]));
        for command in commands {
            assert!(
                script.contains(command),
                "{shell} completion lacks `{command}`"
            );
        }
        assert!(script.contains("--tokenizer"), "{shell}: options too");
    }
    // The bash script is valid bash.
    let script = run(&["completions", "bash"]).stdout;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("compactd.bash");
    std::fs::write(&file, script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).status().unwrap();
    assert!(check.success(), "bash -n rejects the completion script");
    // A closed pipe is not a crash.
    let mut child = Command::new(BIN)
        .args(["completions", "zsh"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn man_pages_come_from_the_cli_definition() {
    let page = stdout(&run(&["man"]));
    assert!(page.contains(".TH compactd 1"), "{page}");
    assert!(page.contains("compactd\\-compact(1)"), "subcommands listed");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    run(&["man", "--out", out.to_str().unwrap()]);
    for name in ["compactd.1", "compactd-compact.1", "compactd-serve.1"] {
        let text = std::fs::read_to_string(out.join(name)).expect(name);
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{name}");
    }
    let compact = std::fs::read_to_string(out.join("compactd-compact.1")).unwrap();
    assert!(compact.contains("\\-\\-instructions"), "options documented");
}

/// Runs `compactd` with a terminal on stdin (through util-linux `script`), stdin then closed.
fn in_a_terminal(shell_command: &str) -> Output {
    Command::new("script")
        .args(["-q", "-e", "-c", shell_command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux `script` runs")
        .wait_with_output()
        .unwrap()
}

#[test]
fn a_daemon_started_in_a_terminal_says_it_waits_for_json_rpc_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr.txt");
    let command = format!("{BIN} 2>{}", err.display());
    let out = in_a_terminal(&command);
    assert!(out.status.success(), "{out:?}");
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(
        stderr.contains("waiting for JSON-RPC on stdin"),
        "stderr: {stderr}"
    );
    // stdout (the terminal here) carries protocol messages only: nothing at all.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");

    // With a pipe on stdin (an editor or agent) there is no notice.
    let piped = Command::new(BIN).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(!stderr.contains("waiting for JSON-RPC"), "stderr: {stderr}");
}

#[test]
fn the_demo_says_which_file_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("demo.jsonl");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-session.jsonl");
    std::fs::copy(demo, &file).unwrap();
    let out = Command::new(BIN)
        .args([
            "compact",
            file.to_str().unwrap(),
            "--summarizer",
            "extractive",
        ])
        .env("COMPACTD_CONFIG_DIR", dir.path().join("config"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = stdout(&out).lines().next().unwrap_or_default().to_owned();
    assert!(
        first.starts_with("compaction entry ")
            && first.ends_with(&format!("appended to {}", file.display())),
        "first line: {first}"
    );
}
