"""`compactd compact` on a real Claude Code transcript, honoured by the real `claude`.

Two turns are run with `claude -p` against the fake model, with a tool call (Bash) in the first
so the transcript holds tool calls and results. Then: compactd refuses the transcript while it
was just written; `plan`, `context` and `search` read it; the README's `compactd compact` line
appends Claude Code's two compaction records (every byte before stays as it was); and
`claude -p … --resume` sends compactd's summary, no longer the first turn.
Run: CLAUDE_BIN=… COMPACTD_BIN=… python test_compact.py
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

FIRST = "FIRST-TURN: remember that the staging database listens on port 48213"
FIRST_REPLY = "FIRST-REPLY noted the port."
PREAMBLE = "This session is being continued from a previous conversation"


def main():
    with tempfile.TemporaryDirectory(prefix="compactd-claude-") as home:
        cwd = os.path.join(home, "project")
        os.makedirs(cwd)
        script = [
            Reply(tool="Bash", tool_input={"command": "echo TOOL-OUTPUT-7781", "description": "echo"}),
            Reply(text=FIRST_REPLY),
            Reply(text="SECOND-REPLY done."),
            Reply(text="THIRD-REPLY resumed."),
        ]
        with FakeAnthropic(script) as fake:
            first = run_claude(home, cwd, fake.url, FIRST, "--allowedTools", "Bash")
            session_id = first["session_id"]
            run_claude(home, cwd, fake.url, "SECOND-TURN: what next?", "--resume", session_id)
            path = transcript_path(home, cwd, session_id)
            check(os.path.exists(path), f"no transcript at {path}")

            # Just written: refused, nothing written.
            os.utime(path)
            before = open(path, "rb").read()
            busy = compactd(home, "compact", path, "--summarizer", "extractive", check_rc=False)
            check(busy.returncode == 1 and "writing this transcript now" in busy.stderr, busy.stderr)
            check(open(path, "rb").read() == before, "a refused compaction changed the file")
            # As if Claude Code had finished with it a minute ago.
            old = time.time() - 60
            os.utime(path, (old, old))

            context = compactd(home, "context", path).stdout
            check(FIRST in context and "SECOND-TURN" in context, context)
            found = compactd(home, "search", path, "TOOL-OUTPUT-7781").stdout
            check("toolResult" in found or "TOOL-OUTPUT-7781" in found, found)
            plan = compactd(home, "plan", path, "--keep-recent-tokens", "5").stdout
            check("first kept entry" in plan, plan)

            argv = [path if a.startswith("~/.claude/projects/") else a for a in readme.compact_command()]
            check(argv[:2] == ["compactd", "compact"], argv)
            compacted = compactd(home, *argv[1:], "--summarizer", "extractive", "--keep-recent-tokens", "5")
            after = open(path, "rb").read()
            check(after.startswith(before), "bytes already in the transcript changed")
            added = [json.loads(line) for line in after[len(before):].decode().splitlines()]
            check(added[0].get("subtype") == "compact_boundary" and added[0]["parentUuid"] is None,
                  f"first appended line: {added[0]}")
            check(added[1].get("isCompactSummary") is True and added[1]["parentUuid"] == added[0]["uuid"],
                  f"second appended line: {added[1]}")
            summary = added[1]["message"]["content"]
            check(summary.startswith(PREAMBLE), summary)

            # A second compaction with nothing new: nothing to compact, nothing written.
            old = time.time() - 60
            os.utime(path, (old, old))
            again = compactd(home, "compact", path, "--summarizer", "extractive", check_rc=False)
            check(again.returncode == 3, f"second compaction: {again.returncode} {again.stderr}")
            check(open(path, "rb").read() == after, "a compaction with nothing to do wrote")

            asked = len(fake.requests)
            run_claude(home, cwd, fake.url, "THIRD-TURN: go on", "--resume", session_id)
            check(len(fake.requests) == asked + 1, f"{len(fake.requests) - asked} requests for one turn")
            texts = user_texts(fake.requests[-1])
            sent = json.dumps(fake.requests[-1]["messages"])
            check(any(t.startswith(PREAMBLE) for t in texts), f"no summary sent: {texts}")
            check(not any(t.strip() == FIRST for t in texts), f"the first turn is still sent: {texts}")
            check(FIRST_REPLY not in sent, f"the first turn's reply is still sent: {sent[:3000]}")
            check("THIRD-TURN" in sent, "the new turn is not sent")
            check(sent.count("SECOND-REPLY done.") == 1, "the verbatim tail is not sent once")
            print(compacted.stdout.splitlines()[0])
    print("claude compact: compactd's compaction is honoured by claude --resume")


if __name__ == "__main__":
    main()
