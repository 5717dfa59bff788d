"""Claude Code (the real binary) calls compactd's `search_history` over MCP.

compactd mcp is registered with the README's config line through `--mcp-config`. The fake
model's first reply is a tool call of `mcp__compactd__search_history` on a compacted compactd
session whose fact (a port) only the compacted part holds; the test checks that the tool result
Claude Code sends back in its next request holds that fact. Then the same on Claude Code's own
transcript, compacted by `compactd compact`: the fact is found in the compacted part.
Run: CLAUDE_BIN=… COMPACTD_BIN=… python test_mcp.py
"""

import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from fake_anthropic import FakeAnthropic, Reply  # noqa: E402
from harness import check, compactd, run_claude, transcript_path, user_texts  # noqa: E402
import readme  # noqa: E402

FACT = "the staging database listens on port 48213"


def write_session(path):
    def message(id_, parent, fields):
        return {"type": "message", "id": id_, "parentId": parent,
                "timestamp": "2026-01-01T00:00:01.000Z", "message": fields}
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"},
        message("u1", None, {"role": "user", "content": "where is staging?", "timestamp": 1}),
        message("t1", "u1", {"role": "toolResult", "toolCallId": "c1", "toolName": "bash",
                             "isError": False, "timestamp": 2, "content": [{"type": "text", "text": FACT}]}),
        message("u2", "t1", {"role": "user", "content": "next step", "timestamp": 3}),
        {"type": "compaction", "id": "k1", "parentId": "u2", "timestamp": "2026-01-01T00:00:05.000Z",
         "summary": "Looked up staging.", "firstKeptEntryId": "u2", "tokensBefore": 1000},
    ]
    with open(path, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


def main():
    with tempfile.TemporaryDirectory(prefix="compactd-claude-") as home:
        cwd = os.path.join(home, "project")
        os.makedirs(cwd)
        session = os.path.join(home, "compacted.jsonl")
        write_session(session)
        config = os.path.join(home, "compactd-mcp.json")
        with open(config, "w") as f:
            f.write(readme.mcp_config() + "\n")
        # The README's config names `compactd`: found on PATH, as for a user.
        os.environ["PATH"] = os.path.dirname(os.environ["COMPACTD_BIN"]) + os.pathsep + os.environ["PATH"]
        script = [
            Reply(tool="mcp__compactd__search_history", tool_input={"session": session, "query": "port 48213"}),
            Reply(text="Staging listens on port 48213."),
        ]
        with FakeAnthropic(script) as fake:
            result = run_claude(home, cwd, fake.url, "Which port does staging listen on? Search the history.",
                                "--mcp-config", config, "--strict-mcp-config",
                                "--allowedTools", "mcp__compactd__search_history")
            check(result.get("result") == "Staging listens on port 48213.", f"result {result}")
            check(len(fake.requests) >= 2, f"{len(fake.requests)} model requests")
            tools = [t.get("name") for t in fake.requests[0].get("tools", [])]
            check("mcp__compactd__search_history" in tools, f"tools sent: {tools}")
            results = [b for m in fake.requests[1]["messages"] if isinstance(m["content"], list)
                       for b in m["content"] if b.get("type") == "tool_result"]
            check(results, "no tool_result in the request after the tool call")
            sent = "\n".join(user_texts(fake.requests[1]))
            check(FACT in sent and "entryId t1" in sent and "(compacted)" in sent,
                  f"the tool result does not hold the recalled fact: {results}")
            check(not any(b.get("is_error") for b in results), f"tool error: {results}")
        own_transcript(home, cwd, config)
    print("claude mcp: search_history recalled the compacted fact through Claude Code")


def own_transcript(home, cwd, config):
    """Claude Code searches its own transcript, compacted by compactd, for what the compaction
    took out of its context."""
    with FakeAnthropic([Reply(text="Noted."), Reply(text="Next.")]) as fake:
        session_id = run_claude(home, cwd, fake.url, f"Remember: {FACT}.")["session_id"]
        run_claude(home, cwd, fake.url, "What next?", "--resume", session_id)
    path = transcript_path(home, cwd, session_id)
    old = time.time() - 60
    os.utime(path, (old, old))
    compactd(home, "compact", path, "--summarizer", "extractive", "--keep-recent-tokens", "5")
    script = [
        Reply(tool="mcp__compactd__search_history", tool_input={"session": path, "query": "port 48213"}),
        Reply(text="Found it."),
    ]
    with FakeAnthropic(script) as fake:
        run_claude(home, cwd, fake.url, "Which port was it? Search the history.", "--resume", session_id,
                   "--mcp-config", config, "--strict-mcp-config",
                   "--allowedTools", "mcp__compactd__search_history")
        check(len(fake.requests) >= 2, f"{len(fake.requests)} model requests")
        texts = [t.strip() for t in user_texts(fake.requests[0])]
        check(f"Remember: {FACT}." not in texts, f"the compacted first turn is still sent: {texts}")
        results = [b for m in fake.requests[1]["messages"] if isinstance(m["content"], list)
                   for b in m["content"] if b.get("type") == "tool_result"]
        sent = json.dumps(results)
        check(results and FACT in sent and "(compacted)" in sent and not any(b.get("is_error") for b in results),
              f"search_history on the transcript: {sent}")


if __name__ == "__main__":
    main()
