"""The installed package against the real daemon ($COMPACTD_BIN, else the repository's debug
build): typed requests, progress callbacks and events, cancellation (sync and asyncio, by
request and by progress token), a client summarizer, error kinds, and the staleness check of
the generated types. A slow fake OpenAI-compatible model on 127.0.0.1 keeps a compaction
running long enough to cancel it."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from compactd_client import ERROR_CODES, PROTOCOL_VERSION, AsyncClient, Cancellation, Client, CompactdError
from compactd_client.protocol import ProgressParams

REPO = Path(__file__).resolve().parents[3]
BIN = os.environ.get("COMPACTD_BIN", str(REPO / "target" / "debug" / "compactd"))
BASE = {"summarizer": {"kind": "extractive"}, "compaction": {"keepRecentTokens": 2000}}


def demo_copy(directory: str) -> str:
    """A copy of the demo session with a fresh id (one open file per session id)."""
    lines = (REPO / "examples" / "demo-session.jsonl").read_text(encoding="utf-8").strip().split("\n")
    header = json.loads(lines[0])
    header["id"] = secrets.token_hex(8)
    path = Path(directory) / f"session-{secrets.token_hex(4)}.jsonl"
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    return str(path)


def last_entry(path: str) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8").strip().split("\n")[-1])
    return entry


def until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class SlowModel:
    """Streams a summary one word every 200 ms; counts requests and hang-ups."""

    def __init__(self) -> None:
        model = self
        self.requests = 0
        self.hangups = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                model.requests += 1
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                try:
                    for _ in range(1000):
                        chunk = {"choices": [{"index": 0, "delta": {"content": "slow "}}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(0.2)
                except (BrokenPipeError, ConnectionResetError):
                    model.hangups += 1

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.settings = {
            "providers": {
                "fake": {
                    "kind": "openai",
                    "baseUrl": f"http://127.0.0.1:{self.server.server_address[1]}/v1",
                    "models": {"slow": {"contextWindow": 200000}},
                }
            },
            "summarizer": {"kind": "openai", "model": "fake/slow"},
            "retry": {"enabled": False},
            "compaction": {"keepRecentTokens": 2000},
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Base(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="compactd-py-")
        # Registered first, so it runs last: after every client made by the test has stopped.
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.env = {"COMPACTD_CONFIG_DIR": os.path.join(self.dir, "config")}

    def client(self, settings: Any = BASE, **options: Any) -> Client:
        client = Client(BIN, env=self.env, settings=settings, stderr=subprocess.DEVNULL, **options)
        self.addCleanup(client.close)
        return client


class GeneratedTypes(unittest.TestCase):
    def test_the_types_are_current_and_a_schema_change_makes_them_stale(self) -> None:
        gen = REPO / "clients" / "python" / "scripts" / "generate.py"
        fresh = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
        self.assertEqual(fresh.returncode, 0, fresh.stderr)
        schema = json.loads((REPO / "schema" / "protocol.schema.json").read_text(encoding="utf-8"))
        schema["$defs"]["SessionInfo"]["properties"]["addedByTheTest"] = {"type": "string"}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as changed:
            json.dump(schema, changed)
        self.addCleanup(os.unlink, changed.name)
        stale = subprocess.run([sys.executable, str(gen), "--check", "--schema", changed.name], capture_output=True, text=True)
        self.assertEqual(stale.returncode, 1)
        self.assertIn("stale", stale.stderr)


class SyncClient(Base):
    def test_initialize_and_typed_requests(self) -> None:
        client = self.client()
        self.assertEqual(client.initialize_result["serverInfo"]["name"], "compactd")
        self.assertEqual(client.initialize_result["capabilities"]["protocolVersion"], PROTOCOL_VERSION)
        path = demo_copy(self.dir)
        info = client.session_open({"path": path})
        self.assertEqual(info["path"], path)
        context = client.session_context({"sessionId": info["sessionId"]})
        self.assertGreater(len(context["messages"]), 10)
        tree = client.session_tree({"sessionId": info["sessionId"]})
        self.assertEqual(tree["leafId"], info["leafId"])
        self.assertEqual(len(tree["nodes"]), info["entryCount"])

    def test_a_compaction_reports_progress_and_events_and_writes_its_entry(self) -> None:
        client = self.client()
        path = demo_copy(self.dir)
        sid = client.session_open({"path": path})["sessionId"]
        progress: list[ProgressParams] = []
        events: list[str] = []
        client.on("session/compactionStarted", lambda p: events.append("started"))
        client.on("session/compactionFinished", lambda p: events.append("finished"))
        result = client.session_compact({"sessionId": sid}, on_progress=progress.append)
        self.assertEqual(last_entry(path)["id"], result["entryId"])
        self.assertEqual(last_entry(path)["type"], "compaction")
        finished = client.wait_notification("session/compactionFinished", lambda p: p["sessionId"] == sid, 10)
        self.assertFalse(finished["aborted"])
        self.assertEqual([p["value"]["kind"] for p in progress][0], "begin")
        self.assertEqual(progress[-1]["value"]["kind"], "end")
        self.assertEqual(events, ["started", "finished"])

    def test_errors_carry_their_kind(self) -> None:
        client = self.client()
        with self.assertRaises(CompactdError) as caught:
            client.session_context({"sessionId": "nope"})
        self.assertEqual(caught.exception.kind, "sessionNotFound")
        self.assertEqual(caught.exception.code, ERROR_CODES["sessionNotFound"])
        self.assertEqual(caught.exception.method, "session/context")

    def test_cancellation_by_request_and_by_progress_token_writes_nothing(self) -> None:
        model = SlowModel()
        self.addCleanup(model.close)
        client = self.client(model.settings)
        # By the request ($/cancelRequest).
        path = demo_copy(self.dir)
        before = Path(path).read_bytes()
        sid = client.session_open({"path": path})["sessionId"]
        cancel = Cancellation()
        errors: list[BaseException] = []

        def compact() -> None:
            try:
                client.session_compact({"sessionId": sid}, cancel=cancel)
            except BaseException as err:  # checked below
                errors.append(err)

        worker = threading.Thread(target=compact)
        worker.start()
        until(lambda: model.requests >= 1, 15, "the summarizer request")
        cancel.cancel()
        worker.join(15)
        self.assertIsInstance(errors[0], CompactdError)
        self.assertEqual(errors[0].kind, "cancelled")  # type: ignore[attr-defined]
        self.assertEqual(Path(path).read_bytes(), before, "nothing written")
        until(lambda: model.hangups >= 1, 5, "the HTTP request to be dropped")

        # By the progress token, as an editor's Cancel button does.
        path = demo_copy(self.dir)
        before = Path(path).read_bytes()
        sid = client.session_open({"path": path})["sessionId"]
        tokens: list[Any] = []
        asked = model.requests
        errors.clear()

        def compact_with_progress() -> None:
            try:
                client.session_compact({"sessionId": sid}, on_progress=lambda p: tokens.append(p["token"]))
            except BaseException as err:  # checked below
                errors.append(err)

        worker = threading.Thread(target=compact_with_progress)
        worker.start()
        until(lambda: model.requests > asked and bool(tokens), 15, "the second summarizer request")
        client.cancel_progress(tokens[0])
        worker.join(15)
        self.assertEqual(getattr(errors[0], "kind", None), "cancelled")
        self.assertEqual(Path(path).read_bytes(), before, "nothing written")

    def test_a_client_summarizer_answers_summarizer_summarize(self) -> None:
        purposes: list[str] = []

        def summarize(params: Any) -> dict[str, str]:
            purposes.append(params["purpose"])
            return {"text": f"## Goal\nFix the overflow (summary by the Python client, {params['purpose']})."}

        client = self.client({"summarizer": {"kind": "client"}, "compaction": {"keepRecentTokens": 2000}}, handlers={"summarizer/summarize": summarize})
        path = demo_copy(self.dir)
        sid = client.session_open({"path": path})["sessionId"]
        result = client.session_compact({"sessionId": sid})
        self.assertIn("history", purposes)
        self.assertIn("summary by the Python client", result["summary"])
        self.assertIn("summary by the Python client", last_entry(path)["summary"])

    def test_close_exits_cleanly_and_a_missing_binary_is_a_clear_error(self) -> None:
        client = Client(BIN, env=self.env, settings=BASE, stderr=subprocess.DEVNULL)
        self.assertEqual(client.close(), 0)
        with self.assertRaisesRegex(FileNotFoundError, "cannot start compactd"):
            Client("no-such-compactd-binary")


class AsyncioClient(Base):
    def test_requests_progress_and_task_cancellation(self) -> None:
        asyncio.run(self.scenario())

    async def scenario(self) -> None:
        model = SlowModel()
        self.addCleanup(model.close)
        async with await AsyncClient.start(BIN, env=self.env, settings=BASE, stderr=subprocess.DEVNULL) as client:
            path = demo_copy(self.dir)
            sid = (await client.session_open({"path": path}))["sessionId"]
            kinds: list[str] = []
            finished = asyncio.create_task(client.wait_notification("session/compactionFinished", lambda p: p["sessionId"] == sid, 10))
            result = await client.session_compact({"sessionId": sid}, on_progress=lambda p: kinds.append(p["value"]["kind"]))
            self.assertEqual(last_entry(path)["id"], result["entryId"])
            self.assertEqual((kinds[0], kinds[-1]), ("begin", "end"))
            self.assertFalse((await finished)["aborted"])
            with self.assertRaises(CompactdError) as caught:
                await client.session_usage({"sessionId": "nope"})
            self.assertEqual(caught.exception.kind, "sessionNotFound")

        async with await AsyncClient.start(BIN, env=self.env, settings=model.settings, stderr=subprocess.DEVNULL) as client:
            path = demo_copy(self.dir)
            before = Path(path).read_bytes()
            sid = (await client.session_open({"path": path}))["sessionId"]
            aborted = asyncio.create_task(client.wait_notification("session/compactionFinished", lambda p: p["sessionId"] == sid, 20))
            task = asyncio.create_task(client.session_compact({"sessionId": sid}))
            while model.requests == 0:
                await asyncio.sleep(0.02)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertTrue((await aborted)["aborted"], "the daemon aborted the compaction")
            self.assertEqual(Path(path).read_bytes(), before, "nothing written")
            self.assertEqual(client.initialize_result["serverInfo"]["name"], "compactd")


if __name__ == "__main__":
    unittest.main()
