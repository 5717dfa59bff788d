"""`compactd mcp` driven by the official MCP Python SDK (PyPI `mcp`, pinned by
scripts/test.d/mcp.sh), started as a subprocess the way agents start MCP servers.

A session file is written to a temporary home: a fact in a tool result that a compaction
summarised, and a 600,000-character output whose full text is in the blob store
(~/.omp/agent/blobs) with a needle at its end. Both must be found by search_history and read
back whole by read_history_entry; a missing blob and a bad session are tool errors, and the
server keeps answering after them. Run: COMPACTD_BIN=target/debug/compactd python client.py
"""

import asyncio
import hashlib
import json
import os
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

NEEDLE = "NEEDLE-mcp-41d2"
FACT = "the staging database listens on port 48213"


def write_session(home: str) -> tuple[str, str]:
    output = "x" * (600_000 - len(NEEDLE)) + NEEDLE
    blobs = os.path.join(home, ".omp", "agent", "blobs")
    os.makedirs(blobs)
    digest = hashlib.sha256(output.encode()).hexdigest()
    with open(os.path.join(blobs, digest), "w") as f:
        f.write(output)
    head = output[:1000] + "\n\n[Session persistence truncated large content]"

    def message(id_, parent, role_fields):
        return {"type": "message", "id": id_, "parentId": parent,
                "timestamp": "2026-01-01T00:00:0%d.000Z" % len(id_), "message": role_fields}

    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"},
        message("u1", None, {"role": "user", "content": "where is staging?", "timestamp": 1}),
        message("t1", "u1", {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "isError": False,
                             "timestamp": 2, "content": [{"type": "text", "text": FACT}]}),
        dict(message("t2", "t1", {"role": "toolResult", "toolCallId": "c2", "toolName": "bash", "isError": False,
                                  "timestamp": 3, "content": [{"type": "text", "text": head}]}),
             compactdFullText={"/message/content/0/text": "blob:sha256:" + digest}),
        message("u2", "t2", {"role": "user", "content": "next step", "timestamp": 4}),
        {"type": "compaction", "id": "k1", "parentId": "u2", "timestamp": "2026-01-01T00:00:05.000Z",
         "summary": "Looked up staging.", "firstKeptEntryId": "u2", "tokensBefore": 1000},
        message("u3", "k1", {"role": "user", "content": "another step", "timestamp": 5}),
    ]
    path = os.path.join(home, "recall.jsonl")
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return path, os.path.join(blobs, digest)


def text_of(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def check(condition: bool, what: str) -> None:
    if not condition:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


async def main() -> None:
    binary = os.environ["COMPACTD_BIN"]
    with tempfile.TemporaryDirectory() as home:
        path, blob = write_session(home)
        params = StdioServerParameters(
            command=binary,
            args=["mcp"],
            env={"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                 "COMPACTD_CONFIG_DIR": os.path.join(home, ".config", "compactd")},
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                check(init.protocol_version in ("2025-06-18", "2025-11-25"), f"version {init.protocol_version}")
                tools = {tool.name for tool in (await session.list_tools()).tools}
                check({"search_history", "read_history_entry", "context_usage"} <= tools, f"tools {tools}")

                found = await session.call_tool("search_history", {"session": path, "query": "PORT 48213"})
                text = text_of(found)
                check(not found.is_error and "entryId t1" in text and "(compacted)" in text, text)

                found = await session.call_tool("search_history", {"session": path, "query": NEEDLE})
                text = text_of(found)
                check("entryId t2" in text and NEEDLE in text, text)

                found = await session.call_tool(
                    "search_history", {"session": path, "query": r"port \d{5}", "regex": True})
                check("entryId t1" in text_of(found), text_of(found))

                # Read back whole, in pages as a model would.
                offset, body = 0, ""
                for _ in range(40):
                    page = await session.call_tool(
                        "read_history_entry",
                        {"session": path, "entryId": "t2", "offset": offset, "maxChars": 100_000})
                    check(not page.is_error, text_of(page))
                    header, _, chunk = text_of(page).partition("\n")
                    more = "more characters: call read_history_entry again with offset " in chunk
                    if more:
                        chunk, _, tail = chunk.rpartition("\n[")
                        offset = int(tail.rsplit(" ", 1)[1].rstrip("]"))
                    body += chunk
                    if not more:
                        break
                check(NEEDLE in body and body.count("x") >= 600_000 - len(NEEDLE), f"read {len(body)} chars")
                check("truncated large content" not in body, "the truncated head came back")

                usage = await session.call_tool("context_usage", {"session": path})
                check(not usage.is_error and "window" in text_of(usage), text_of(usage))

                os.remove(blob)
                missing = await session.call_tool("read_history_entry", {"session": path, "entryId": "t2"})
                check(missing.is_error and os.path.basename(blob) in text_of(missing), text_of(missing))
                bad = await session.call_tool("search_history", {"session": os.path.join(home, "none.jsonl"), "query": "x"})
                check(bad.is_error and "not found" in text_of(bad), text_of(bad))
                bad = await session.call_tool("search_history", {"session": path})
                check(bad.is_error, text_of(bad))
                # Still answering after the errors.
                await session.send_ping()
    print("mcp client: ok")


asyncio.run(main())
