//! Conformance checks against the reference's real fixtures (spec §10.2) that the unit tests
//! cannot make: the `plan` command in parity mode reproduces the reference's cut, and the
//! difference to compactd's rules is exactly the kept region the reference loses (spec §13 #1).
//! See `docs/conformance.md`.

use devtools::fixtures::{pi_session, run_cli};
use serde_json::Value;

fn cli_json(args: &[&str]) -> Value {
    let out = run_cli(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Messages a plan accounts for: summarised, turn prefix and kept.
fn covered(plan: &Value) -> u64 {
    [
        "messagesToSummarize",
        "turnPrefixMessages",
        "recentMessages",
    ]
    .iter()
    .map(|k| plan[k].as_u64().unwrap())
    .sum()
}

#[test]
fn parity_plan_loses_the_kept_region_and_compactd_covers_the_whole_context() {
    let path = pi_session("before-compaction.jsonl");
    let path = path.to_str().unwrap();
    let before = std::fs::read(path).unwrap();
    let plan = |parity: bool| {
        let mut args = vec!["plan", "--json", "--tokenizer", "chars4"];
        if parity {
            args.push("--parity");
        }
        args.push(path);
        cli_json(&args)
    };
    let fixed = plan(false);
    let parity = plan(true);
    assert_eq!(fixed["mode"], "fixed");
    assert_eq!(parity["mode"], "parity");

    // The live context: the latest summary, then every message compactd's plan must cover.
    let context = cli_json(&["context", "--json", "--tokenizer", "chars4", path]);
    let context_messages = context["messages"].as_array().unwrap().len() as u64;
    assert_eq!(covered(&fixed), context_messages - 1, "deviation 1");
    // The reference's window starts after the latest compaction: the 77 messages it kept
    // (firstKeptEntryIndex 551 up to the compaction) are neither summarised nor kept.
    assert_eq!(covered(&fixed) - covered(&parity), 77, "spec §13 #1");

    // Both cut on a message the reference accepts as a cut point, and both see the previous
    // summary and the same measured usage.
    for p in [&fixed, &parity] {
        let kind = p["firstKeptEntryKind"].as_str().unwrap();
        assert!(
            kind == "message/user" || kind == "message/assistant",
            "{kind}"
        );
        assert_eq!(p["previousSummary"], true);
        assert_eq!(p["tokensBefore"], 168_018);
    }
    assert_eq!(std::fs::read(path).unwrap(), before, "plan never writes");
}
