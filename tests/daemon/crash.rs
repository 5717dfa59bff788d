//! Crash safety (issue 6, item 1): the real daemon is killed with SIGKILL at random moments
//! while it appends, compacts, prunes (a rewrite) and migrates a version 1 file (a rewrite).
//! After every kill: the file loads with no malformed line, every acknowledged entry is there,
//! a rewrite is either fully there or not at all, and the leaf is valid.
//!
//! The short form (25 kills) runs in CI; `COMPACTD_LONG_TESTS=1` runs 250.
//! `COMPACTD_CRASH_SEED` replays a run. Results of the last long run are in
//! `docs/robustness.md`.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use compactd::session::EntryKind;
use compactd::session::{Entry, Session};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

/// splitmix64: a seeded PRNG with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The daemon over pipes, read by a thread so a kill never blocks the test.
struct Daemon {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Value>,
    buffer: Vec<Value>,
    next_id: i64,
}

impl Daemon {
    fn spawn(home: &Path) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_compactd"))
            .env("COMPACTD_CONFIG_DIR", home.join("config"))
            .env("COMPACTD_DATA_DIR", home.join("data"))
            .env("COMPACTD_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("compactd starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Ok(v) = serde_json::from_str(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        Daemon {
            child,
            stdin,
            rx,
            buffer: Vec::new(),
            next_id: 1,
        }
    }

    fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        // A write can fail only when the daemon is gone, which the test reports elsewhere.
        let _ = writeln!(self.stdin, "{line}");
        id
    }

    fn wait(&mut self, id: i64) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(at) = self.buffer.iter().position(|m| m["id"] == id) {
                return self.buffer.remove(at);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) => self.buffer.push(m),
                Err(RecvTimeoutError::Timeout) => panic!("no response to {id} in time"),
                Err(RecvTimeoutError::Disconnected) => panic!("compactd died before {id}"),
            }
        }
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let response = self.wait(id);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// SIGKILL, then every message the daemon wrote before it died.
    fn kill(mut self) -> Vec<Value> {
        self.child.kill().expect("kill compactd");
        self.child.wait().expect("reap compactd");
        let mut all = std::mem::take(&mut self.buffer);
        // The reader thread ends at EOF, which the kill guarantees.
        while let Ok(m) = self.rx.recv_timeout(TIMEOUT) {
            all.push(m);
        }
        all
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Scenario {
    Appends,
    Compaction,
    Prune,
    Migration,
}

fn user(text: &str) -> Value {
    json!({"type": "message", "message": {"role": "user", "content": text, "timestamp": 1}})
}

/// The entry as a JSON line, to search for markers.
fn text_of(entry: &Entry) -> String {
    entry.to_value().to_string()
}

/// A session whose old tool outputs are worth pruning (chars4: ~12k tokens each).
fn write_prunable(path: &Path) {
    let mut out = String::new();
    out.push_str(&json!({"type":"session","version":3,"id":"prunable","timestamp":"2026-01-01T00:00:00.000Z","cwd":""}).to_string());
    out.push('\n');
    let mut parent = Value::Null;
    let mut n = 0;
    let mut push = |out: &mut String, parent: &mut Value, mut entry: Value| {
        n += 1;
        let id = format!("e{n:04}");
        entry["id"] = json!(id);
        entry["parentId"] = parent.clone();
        entry["timestamp"] = json!("2026-01-01T00:00:01.000Z");
        out.push_str(&entry.to_string());
        out.push('\n');
        *parent = json!(id);
    };
    for j in 0..8 {
        push(&mut out, &mut parent, user(&format!("run step {j}")));
        push(
            &mut out,
            &mut parent,
            json!({"type":"message","message":{"role":"assistant",
                "content":[{"type":"toolCall","id":format!("call{j}"),"name":"bash","arguments":{"command":"ls"}}],
                "provider":"p","model":"m","usage":{"input":10,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":20},
                "stopReason":"toolUse","timestamp":2}}),
        );
        push(
            &mut out,
            &mut parent,
            json!({"type":"message","message":{"role":"toolResult","toolCallId":format!("call{j}"),
                "toolName":"bash","content":[{"type":"text","text":"output line\n".repeat(4000)}],
                "isError":false,"timestamp":3}}),
        );
    }
    std::fs::write(path, out).unwrap();
}

fn pruned_ids(session: &Session) -> HashSet<String> {
    session
        .entries()
        .iter()
        .filter(|e| text_of(e).contains("\"prunedAt\""))
        .map(|e| e.id.clone())
        .collect()
}

#[derive(Default, Debug)]
struct Stats {
    kills: usize,
    by_scenario: HashMap<String, usize>,
    /// Kills that landed with some of the iteration's requests unanswered.
    mid_operation: usize,
    acked_appends: usize,
    rewrites_seen_applied: usize,
    rewrites_seen_old: usize,
    leftover_temp_files: usize,
    /// Kills that cut the batch being written: part of it is the file's last line.
    torn_tails: usize,
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let long = std::env::var("COMPACTD_LONG_TESTS").is_ok_and(|v| v == "1");
    let kills = if long { 250 } else { 25 };
    let seed = std::env::var("COMPACTD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xC0FFEE);
    let mut rng = Rng(seed);
    let home = tempfile::tempdir().unwrap();
    let work = home.path().join("sessions");
    std::fs::create_dir_all(home.path().join("config")).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let prunable = home.path().join("prunable.jsonl");
    write_prunable(&prunable);
    let long_lived = work.join("long-lived.jsonl");
    Session::create(&long_lived, "", Default::default()).unwrap();
    // id -> marker text of every acknowledged append to the long-lived file.
    let mut acked_long: HashMap<String, String> = HashMap::new();
    let mut stats = Stats::default();
    let started = Instant::now();

    for kill in 0..kills {
        let scenario = match rng.below(4) {
            0 => Scenario::Appends,
            1 => Scenario::Compaction,
            2 => Scenario::Prune,
            _ => Scenario::Migration,
        };
        let sync = if rng.below(2) == 0 { "os" } else { "fsync" };
        std::fs::write(
            home.path().join("config/settings.json"),
            json!({"compaction": {"enabled": false, "keepRecentTokens": 300},
                   "tokenizer": "chars4", "storage": {"sync": sync}})
            .to_string(),
        )
        .unwrap();
        let path = match scenario {
            Scenario::Appends | Scenario::Compaction => long_lived.clone(),
            Scenario::Prune => {
                let p = work.join(format!("prune-{kill}.jsonl"));
                std::fs::copy(&prunable, &p).unwrap();
                p
            }
            Scenario::Migration => {
                let p = work.join(format!("v1-{kill}.jsonl"));
                std::fs::copy(devtools::fixtures::session("v1.jsonl"), &p).unwrap();
                p
            }
        };
        let before = std::fs::read(&path).unwrap();
        let (before_session, _) = Session::open(&path).unwrap();

        let mut d = Daemon::spawn(home.path());
        d.ok(
            "initialize",
            json!({"processId": null, "capabilities": {}, "clientInfo": {"name": "crash"}}),
        );
        let info = d.ok("session/open", json!({"path": path}));
        let session = info["sessionId"].as_str().unwrap().to_owned();
        let expected_prune = if scenario == Scenario::Prune {
            let dry = d.ok(
                "session/prune",
                json!({"sessionId": session, "dryRun": true}),
            );
            let ids: HashSet<String> = dry["prunedEntryIds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            assert!(!ids.is_empty(), "the prunable fixture has outputs to prune");
            ids
        } else {
            HashSet::new()
        };

        // Pipeline the operation and appends, then kill at a random moment.
        let mut appends: HashMap<i64, String> = HashMap::new();
        let mut op_id = None;
        let append_count = if scenario == Scenario::Appends {
            40
        } else {
            12
        };
        match scenario {
            Scenario::Compaction => {
                op_id = Some(d.send("session/compact", json!({"sessionId": session})));
            }
            Scenario::Prune => {
                op_id = Some(d.send("session/prune", json!({"sessionId": session})));
            }
            _ => {}
        }
        for k in 0..append_count {
            let marker = format!("crash-{seed:x}-{kill}-{k}");
            let id = d.send(
                "session/append",
                json!({"sessionId": session, "entries": [user(&marker)]}),
            );
            appends.insert(id, marker);
        }
        std::thread::sleep(Duration::from_micros(rng.below(60_000)));
        let messages = d.kill();
        stats.kills += 1;
        *stats
            .by_scenario
            .entry(format!("{scenario:?}/{sync}"))
            .or_default() += 1;

        // What the client saw acknowledged.
        let responses: HashMap<i64, &Value> = messages
            .iter()
            .filter(|m| m.get("method").is_none())
            .filter_map(|m| Some((m["id"].as_i64()?, m)))
            .collect();
        if responses.len() < appends.len() + usize::from(op_id.is_some()) {
            stats.mid_operation += 1;
        }
        let mut acked: HashMap<String, String> = HashMap::new();
        for (id, marker) in &appends {
            if let Some(r) = responses.get(id)
                && let Some(ids) = r["result"]["appended"].as_array()
            {
                acked.insert(ids[0].as_str().unwrap().to_owned(), marker.clone());
            }
        }
        stats.acked_appends += acked.len();

        // The file after the crash.
        let (after, report) = Session::open(&path)
            .unwrap_or_else(|e| panic!("kill {kill} ({scenario:?}): file does not load: {e}"));
        let ctx = format!("kill {kill} ({scenario:?}, sync {sync}, seed {seed:#x})");
        assert!(
            report.skipped.is_empty(),
            "{ctx}: malformed lines {report:?}"
        );
        assert!(report.duplicate_ids.is_empty(), "{ctx}: {report:?}");
        // A kill that lands while the kernel copies a batch into the file stops the copy at
        // a page boundary (a pending fatal signal ends `write` early), so the first part of
        // a batch that crosses one can be the file's last line: never acknowledged (the
        // checks below find every acknowledged entry among the parsed ones), skipped on load
        // and cut away by the next write (the long-lived file of the append and compaction
        // runs is written again by a later iteration; a torn line left in its middle would be
        // a skipped line, which the check above refuses).
        if let Some(torn) = &report.torn_tail {
            stats.torn_tails += 1;
            let bytes = std::fs::read(&path).unwrap();
            let lines = bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count();
            assert_eq!(
                torn.line, lines,
                "{ctx}: a torn line before the end {report:?}"
            );
            assert!(
                !bytes.ends_with(b"\n"),
                "{ctx}: a torn line ends in a newline"
            );
        }
        if matches!(scenario, Scenario::Appends | Scenario::Compaction) {
            acked_long.extend(acked.clone());
        }
        let must_have = if matches!(scenario, Scenario::Appends | Scenario::Compaction) {
            &acked_long
        } else {
            &acked
        };
        for (id, marker) in must_have {
            let entry = after
                .get(id)
                .unwrap_or_else(|| panic!("{ctx}: acknowledged entry {id} lost"));
            assert!(text_of(entry).contains(marker.as_str()), "{ctx}: {id}");
        }
        let mut markers = HashSet::new();
        // Only messages count: a compaction's summary may quote the requests it summarised.
        let messages_after = after
            .entries()
            .iter()
            .filter(|e| matches!(e.kind(), EntryKind::Message(_)));
        for e in messages_after {
            let text = text_of(e);
            if let Some(at) = text.find("crash-") {
                let marker: String = text[at..].chars().take_while(|c| *c != '"').collect();
                assert!(markers.insert(marker.clone()), "{ctx}: {marker} twice");
            }
        }
        // Every entry that was there before is still there (appends and rewrites keep all).
        if scenario != Scenario::Migration {
            for e in before_session.entries() {
                assert!(after.get(&e.id).is_some(), "{ctx}: entry {} vanished", e.id);
            }
        }
        if let Some(op) = op_id
            && let Some(r) = responses.get(&op)
            && scenario == Scenario::Compaction
            && let Some(entry_id) = r["result"]["entryId"].as_str()
        {
            assert!(
                after.get(entry_id).is_some(),
                "{ctx}: acked compaction lost"
            );
        }
        match scenario {
            Scenario::Prune => {
                let pruned = pruned_ids(&after);
                let acked_prune = op_id
                    .and_then(|op| responses.get(&op))
                    .is_some_and(|r| r.get("result").is_some());
                if pruned.is_empty() {
                    assert!(!acked_prune, "{ctx}: acknowledged prune not on disk");
                    stats.rewrites_seen_old += 1;
                } else {
                    assert_eq!(pruned, expected_prune, "{ctx}: half-applied prune");
                    stats.rewrites_seen_applied += 1;
                }
            }
            Scenario::Migration => {
                let on_disk = std::fs::read_to_string(&path).unwrap();
                let header: Value = serde_json::from_str(on_disk.lines().next().unwrap()).unwrap();
                if header["version"].as_u64().unwrap_or(1) < 3 {
                    assert_eq!(
                        std::fs::read(&path).unwrap(),
                        before,
                        "{ctx}: a v1 file changed without being migrated"
                    );
                    assert!(acked.is_empty(), "{ctx}: acked appends but no migration");
                    stats.rewrites_seen_old += 1;
                } else {
                    // All original entries, in order, then only our appends.
                    // Ids are new after a v1 migration, so compare content only.
                    let content = |e: &Entry| {
                        let mut v = e.to_value();
                        for field in ["id", "parentId", "firstKeptEntryId"] {
                            v.as_object_mut().map(|o| o.remove(field));
                        }
                        v
                    };
                    let old: Vec<Value> = before_session.entries().iter().map(content).collect();
                    let new: Vec<Value> = after
                        .entries()
                        .iter()
                        .take(old.len())
                        .map(content)
                        .collect();
                    assert_eq!(old, new, "{ctx}: migration lost or changed entries");
                    stats.rewrites_seen_applied += 1;
                }
            }
            _ => {}
        }
        // The leaf is an entry, and the path to it is intact.
        match after.leaf_id() {
            Some(leaf) => {
                assert!(after.get(leaf).is_some(), "{ctx}: leaf {leaf} missing");
                let path = after.path_to_leaf();
                assert_eq!(path.last().map(|e| e.id.as_str()), Some(leaf), "{ctx}");
            }
            None => assert!(after.entries().is_empty(), "{ctx}: entries but no leaf"),
        }
    }
    stats.leftover_temp_files = std::fs::read_dir(&work)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        })
        .count();
    eprintln!(
        "crash: seed {seed:#x}, {} kills in {:?}: {stats:?}",
        stats.kills,
        started.elapsed()
    );
    assert!(stats.mid_operation > 0, "no kill landed mid-operation");
}
