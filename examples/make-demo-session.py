#!/usr/bin/env python3
"""Writes examples/demo-session.jsonl: a deterministic, realistic version-3 session of a coding
agent fixing a bug in a small Rust project. About 45k tokens, so a compaction has history to
summarise and a recent part to keep. Run it again to regenerate the file byte for byte."""
import json, random, pathlib

rng = random.Random(7)
out = []
ids = iter(f"{n:08x}" for n in range(0x1000, 0x100000, 0x1f3))
ts = [1767254400000]  # 2026-01-01T08:00:00Z

def tick(ms):
    ts[0] += ms
    t = ts[0]
    import datetime
    return datetime.datetime.fromtimestamp(t / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t % 1000:03d}Z"

parent = [None]
def entry(kind, **fields):
    e = {"type": kind, "id": next(ids), "parentId": parent[0], "timestamp": tick(rng.randint(800, 9000))}
    e.update(fields)
    out.append(e)
    parent[0] = e["id"]
    return e

tokens = [3200]
def user(text):
    entry("message", message={"role": "user", "content": text, "timestamp": ts[0]})

def assistant(text=None, calls=(), stop="toolUse"):
    content = []
    if text:
        content.append({"type": "text", "text": text})
    for i, (name, args) in enumerate(calls):
        content.append({"type": "toolCall", "id": f"call_{len(out)}_{i}", "name": name, "arguments": args})
    tokens[0] += 900 + sum(len(json.dumps(a)) for _, a in calls) // 3 + len(text or "") // 3
    usage = {"input": tokens[0], "output": 250, "cacheRead": 0, "cacheWrite": 0, "totalTokens": tokens[0] + 250,
             "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}
    entry("message", message={"role": "assistant", "content": content, "api": "anthropic-messages",
          "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage,
          "stopReason": stop if calls else "stop", "timestamp": ts[0]})
    return [c for c in content if c["type"] == "toolCall"]

def result(call, text, error=False):
    tokens[0] += len(text) // 3
    entry("message", message={"role": "toolResult", "toolCallId": call["id"], "toolName": call["name"],
          "content": [{"type": "text", "text": text}], "isError": error, "timestamp": ts[0]})

def rust_file(name, fns):
    body = [f"//! {name}: part of the ledger crate.", "use std::collections::BTreeMap;", ""]
    for i in range(fns):
        body += [f"/// Computes step {i} of the {name} pipeline.",
                 f"pub fn {name}_step_{i}(input: &BTreeMap<String, i64>) -> Result<i64, LedgerError> {{",
                 f"    let base = input.get(\"k{i}\").copied().ok_or(LedgerError::Missing(\"k{i}\"))?;",
                 f"    let scaled = base.checked_mul({i + 3}).ok_or(LedgerError::Overflow)?;",
                 f"    Ok(scaled - {rng.randint(1, 99)})", "}", ""]
    return "\n".join(body)

entry("session", id="ignored")  # placeholder, replaced below
out.pop(); parent[0] = None
header = {"type": "session", "version": 3, "id": "0d3a0c0ffee0a1b2", "timestamp": tick(0), "cwd": "/home/dev/ledger"}

entry("model_change", model="anthropic/claude-sonnet-4-5")
entry("thinking_level_change", thinkingLevel="medium")
user("The `ledger balance` command panics with 'attempt to subtract with overflow' when an account has "
     "more than 2^31 cents. Find the cause and fix it. Always keep the public API of src/ledger.rs unchanged, "
     "and never use unwrap() in library code.")
calls = assistant("I'll start by reading the ledger module and the balance command.",
                  [("read", {"path": "src/ledger.rs"}), ("read", {"path": "src/commands/balance.rs"})])
result(calls[0], rust_file("ledger", 40))
result(calls[1], rust_file("balance", 25))
for round_ in range(6):
    mod = ["accounts", "posting", "currency", "report", "import", "parse"][round_]
    calls = assistant(f"Let me look at src/{mod}.rs, which the balance path goes through.",
                      [("read", {"path": f"src/{mod}.rs"}), ("grep", {"pattern": "as i32", "path": "src"})])
    result(calls[0], rust_file(mod, 30))
    result(calls[1], "\n".join(f"src/{mod}.rs:{rng.randint(10, 400)}: let cents = total as i32;" for _ in range(8)))
calls = assistant("Found it: `Posting::cents` is stored as i64 but `sum_postings` narrows to i32 with `as i32` "
                  "before subtracting. I decided to widen the accumulator to i128 and use checked arithmetic "
                  "instead of narrowing, so the public API stays unchanged.",
                  [("edit", {"path": "src/posting.rs", "oldText": "let cents = total as i32;", "newText": "let cents: i128 = total.into();"})])
result(calls[0], "Applied 1 edit to src/posting.rs")
calls = assistant("Now I'll run the tests.", [("bash", {"command": "cargo test"})])
result(calls[0], "error[E0308]: mismatched types\n  --> src/report.rs:88:24\n   |\n88 |     render_total(cents)\n   |                  ^^^^^ expected `i64`, found `i128`\n\nerror: could not compile `ledger` (lib) due to 1 previous error", error=True)
calls = assistant("The report module still expects i64. I'll convert at the boundary with `i64::try_from` and "
                  "return `LedgerError::Overflow` when it does not fit.",
                  [("edit", {"path": "src/report.rs", "oldText": "render_total(cents)", "newText": "render_total(i64::try_from(cents).map_err(|_| LedgerError::Overflow)?)"})])
result(calls[0], "Applied 1 edit to src/report.rs")
calls = assistant(None, [("bash", {"command": "cargo test"})])
result(calls[0], "running 48 tests\n" + "\n".join(f"test tests::case_{i} ... ok" for i in range(48)) + "\n\ntest result: ok. 48 passed; 0 failed")
user("Great. Also add a regression test with a balance of 3,000,000,000 cents, and write it in tests/overflow.rs.")
calls = assistant("I'll add the regression test.", [("write", {"path": "tests/overflow.rs", "content": "#[test]\nfn large_balance_does_not_overflow() {\n    let ledger = ledger::Ledger::with_balance(3_000_000_000);\n    assert_eq!(ledger.balance().cents(), 3_000_000_000);\n}\n"})])
result(calls[0], "Wrote tests/overflow.rs (5 lines)")
for i in range(5):
    calls = assistant(f"Checking the import path for large values, part {i + 1}.", [("read", {"path": f"src/import/csv_{i}.rs"})])
    result(calls[0], rust_file(f"csv_{i}", 28))
calls = assistant(None, [("bash", {"command": "cargo test --test overflow"})])
result(calls[0], "running 1 test\ntest large_balance_does_not_overflow ... ok\n\ntest result: ok. 1 passed; 0 failed")
assistant("The fix is in and the regression test passes. Next I could also harden the CSV importer, which "
          "parses amounts with `parse::<i32>()`.\n\nShould I change the CSV importer to parse amounts as i64 as well, "
          "or leave it as it is for this change?")

pathlib.Path(__file__).with_name("demo-session.jsonl").write_text(
    "\n".join(json.dumps(l, separators=(",", ":")) for l in [header] + out) + "\n")
