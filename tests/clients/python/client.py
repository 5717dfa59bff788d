"""Drives ``compactd serve`` with pygls's JSON-RPC client (LSP framing over pipes).

initialize -> session/create -> session/append -> session/compact (extractive, with
``$/progress``) -> session/context -> shutdown/exit. Exits non-zero on any failed check.
"""

import asyncio
import os
import shutil
import sys
import tempfile
import time

from pygls.client import JsonRPCClient

TIMEOUT = 30


def as_dict(value):
    """Plain JSON values from what pygls hands back for untyped methods: namedtuple-like
    objects (recursively), attrs objects or dicts."""
    if hasattr(value, "_asdict"):
        return {k: as_dict(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: as_dict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_dict(v) for v in value]
    if hasattr(value, "__attrs_attrs__"):
        import cattrs

        return cattrs.unstructure(value)
    return value


def turns(n):
    bulk = "lorem ipsum dolor sit amet " * 40
    now = int(time.time() * 1000)
    entries = []
    for i in range(n):
        entries.append({"type": "message", "message": {
            "role": "user", "content": f"Step {i}: edit src/file{i}.rs. {bulk}", "timestamp": now}})
        entries.append({"type": "message", "message": {
            "role": "assistant", "content": [{"type": "text", "text": f"Done with step {i}. {bulk}"}],
            "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "stop",
            "timestamp": now,
            "usage": {"input": 1000, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1010}}})
    return entries


async def main():
    binary = os.environ["COMPACTD_BIN"]
    home = tempfile.mkdtemp(prefix="compactd-pygls-")
    project = os.path.join(home, "project")
    os.makedirs(project)
    env = dict(os.environ, COMPACTD_CONFIG_DIR=os.path.join(home, "config"),
               COMPACTD_DATA_DIR=os.path.join(home, "data"))

    client = JsonRPCClient()
    progress = []
    notifications = []

    @client.feature("$/progress")
    def on_progress(params):
        progress.append(as_dict(params))

    for method in ("session/compactionStarted", "session/compactionFinished",
                   "session/compactionDelta", "session/entriesAppended"):
        client.feature(method)(lambda params, method=method: notifications.append((method, as_dict(params))))

    await client.start_io(binary, "serve", env=env)
    request = lambda method, params: asyncio.wait_for(  # noqa: E731
        client.protocol.send_request_async(method, params), TIMEOUT)

    init = as_dict(await request("initialize", {
        "processId": os.getpid(), "clientInfo": {"name": "pygls-test"}, "capabilities": {},
        "initializationOptions": {"settings": {"summarizer": {"kind": "extractive"},
                                               "compaction": {"keepRecentTokens": 200}}}}))
    assert init["serverInfo"]["name"] == "compactd", init
    client.protocol.notify("initialized", {})

    info = as_dict(await request("session/create", {"cwd": project}))
    session_id = info["sessionId"]

    appended = as_dict(await request("session/append", {"sessionId": session_id, "entries": turns(6)}))
    assert len(appended["appended"]) == 12, appended
    assert appended["action"] == "continue", appended

    token = "pygls-compact-1"
    compacted = as_dict(await request("session/compact", {"sessionId": session_id, "workDoneToken": token}))
    assert compacted["entryId"], compacted
    assert compacted["summary"], compacted
    assert compacted["tokensAfter"] < compacted["tokensBefore"], compacted
    # Notifications written before the response have been dispatched by now; give the event
    # loop one turn in case a handler is still queued.
    await asyncio.sleep(0)
    values = [p["value"] for p in progress if p.get("token") == token]
    assert values and values[0]["kind"] == "begin", progress
    assert values[-1]["kind"] == "end" and values[-1]["message"] == "done", progress
    methods = [m for m, _ in notifications]
    assert "session/compactionStarted" in methods and "session/compactionFinished" in methods, methods
    finished = next(p for m, p in notifications if m == "session/compactionFinished")
    assert finished["result"]["entryId"] == compacted["entryId"], finished

    context = as_dict(await request("session/context", {"sessionId": session_id}))
    assert context["leafId"] == compacted["entryId"], context
    assert "<summary>" in str(context["messages"][0]["content"]), context["messages"][0]

    await request("shutdown", None)
    client.protocol.notify("exit", None)
    server = client._server
    code = await asyncio.wait_for(server.wait(), TIMEOUT) if server else 0
    assert code == 0, code
    await client.stop()
    # Kept when a check fails (the session is there to look at); gone on success.
    if not os.environ.get("COMPACTD_KEEP_TMP"):
        shutil.rmtree(home, ignore_errors=True)
    print("pygls client: ok")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as error:  # noqa: BLE001 - report any failure as a failed run
        import traceback

        traceback.print_exc()
        print(f"pygls client failed: {error}", file=sys.stderr)
        sys.exit(1)
