"""`compactd mcp` inside the real Codex CLI (scripts/test.d/codex.sh installs it).

Codex is configured with the README's "Use with Codex" line (`mcp_servers.compactd = …`),
with its model played by a scripted fake Responses-API server on 127.0.0.1. The fake model
calls `search_history` on a compacted session for a fact that only the compacted part holds;
the test checks that Codex ran the tool without asking (the tools are marked read-only) and
sent the recalled fact back to the model in the tool's output.
Run: COMPACTD_BIN=… CODEX_BIN=… python3 test_mcp.py
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import codex_home  # noqa: E402
from fake_responses import FakeResponses, call_item, text_item  # noqa: E402

FACT = "the staging database listens on port 48213"


def fail(what):
    print("FAIL:", what, file=sys.stderr)
    sys.exit(1)


def write_compacted_session(path):
    def message(id_, parent, body):
        return {"type": "message", "id": id_, "parentId": parent,
                "timestamp": "2026-01-01T00:00:01.000Z", "message": body}
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T00:00:00.000Z",
         "cwd": "/"},
        message("u1", None, {"role": "user", "content": "where is staging?", "timestamp": 1}),
        message("t1", "u1", {"role": "toolResult", "toolCallId": "c1", "toolName": "bash",
                             "isError": False, "timestamp": 2,
                             "content": [{"type": "text", "text": FACT}]}),
        message("u2", "t1", {"role": "user", "content": "next step", "timestamp": 3}),
        {"type": "compaction", "id": "k1", "parentId": "u2",
         "timestamp": "2026-01-01T00:00:05.000Z", "summary": "Looked up staging.",
         "firstKeptEntryId": "u2", "tokensBefore": 1000},
    ]
    with open(path, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


def mcp_config(binary):
    """The README's line of config, with the compactd under test."""
    line = codex_home.readme_block("toml").strip()
    if line != 'mcp_servers.compactd = { command = "compactd", args = ["mcp"] }':
        fail(f"the README's Codex config changed; update this test: {line}")
    return line.replace('"compactd", args', json.dumps(binary) + ", args")


def tool_names(request):
    """(namespace, name) of every function the request offers the model."""
    names = []
    for tool in request.get("tools", []):
        if tool.get("type") == "namespace":
            names += [(tool.get("name"), t.get("name")) for t in tool.get("tools", [])]
        else:
            names.append((None, tool.get("name")))
    return names


def main():
    binary = os.environ["COMPACTD_BIN"]
    with tempfile.TemporaryDirectory(prefix="compactd-codex-") as tmp:
        session = os.path.join(tmp, "recall.jsonl")
        write_compacted_session(session)
        outputs = []

        def call_search(request):
            offered = tool_names(request)
            found = [ns for ns, name in offered if name == "search_history"]
            if not found:
                fail(f"search_history is not offered to the model: {offered}")
            return [call_item("search_history", {"session": session, "query": "port 48213"},
                              namespace=found[0])]

        def answer(request):
            outputs.extend(i for i in request["input"] if i.get("type") == "function_call_output")
            return [text_item("The staging database is on port 48213.", 2)]

        with FakeResponses([call_search, answer]) as fake:
            home = os.path.join(tmp, "codex-home")
            codex_home.write_config(home, fake.port, top=mcp_config(binary))
            run = codex_home.run(home, ["exec", "--skip-git-repo-check",
                                        "Which port does staging use? Search the history."],
                                 cwd=tmp, user_home=tmp)
            if run.returncode != 0:
                fail(f"codex exec exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
            if fake.errors:
                fail(f"fake server: {fake.errors}")
            if len(fake.requests) != 2:
                fail(f"expected 2 model requests, got {len(fake.requests)}:\n{run.stderr}")
        text = json.dumps([o.get("output") for o in outputs])
        if not outputs or "48213" not in text or "entryId t1" not in text:
            fail(f"the tool output sent back does not hold the recalled fact: {text}")
        if "(compacted)" not in text:
            fail(f"the hit is not marked compacted: {text}")
    print("codex mcp: search_history recalled the compacted fact through Codex")


if __name__ == "__main__":
    main()
