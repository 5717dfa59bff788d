"""A minimal compactd client: JSON-RPC 2.0 with LSP framing over a child process's pipes.

Standard library only, so it doubles as the reference for writing a client in another language:

* framing: every message is ``Content-Length: N\\r\\n\\r\\n`` followed by N bytes of UTF-8 JSON;
* one reader thread parses frames and routes them: responses to the waiting request (matched by
  ``id``), notifications to a queue, server-to-client requests to ``handle_server_request``;
* ``request`` blocks (with a timeout) until its response arrives and raises ``CompactdError``
  for an error answer, carrying the protocol's ``data.kind`` (see docs/protocol.md §6).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from typing import Any, Callable, Optional


class CompactdError(Exception):
    """An error answer: ``code``, ``kind`` (``data.kind``, e.g. ``leafMoved``) and ``data``."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data if isinstance(data, dict) else {}
        self.kind = self.data.get("kind")


class CompactdClosed(Exception):
    """The daemon exited or closed its stdout while we were waiting."""


class CompactdClient:
    """A connection to one ``compactd serve`` child process.

    ``cmd`` defaults to ``["compactd", "serve"]``; ``env`` is added to the inherited
    environment (``COMPACTD_CONFIG_DIR``, ``COMPACTD_DATA_DIR`` ...).
    """

    def __init__(
        self,
        cmd: Optional[list[str]] = None,
        env: Optional[dict[str, str]] = None,
        stderr: Any = None,
    ):
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            cmd or ["compactd", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=full_env,
        )
        self._next_id = 1
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, dict[str, Any]] = {}
        self._closed = threading.Event()
        self.notifications: "queue.Queue[dict[str, Any]]" = queue.Queue()
        # Notifications taken off the queue by wait_notification but not matched yet, in order.
        self._backlog: list[dict[str, Any]] = []
        # Answers server-to-client requests; returns the result or raises CompactdError.
        self.handle_server_request: Callable[[str, Any], Any] = self._default_server_request
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    # -- framing ---------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        message.setdefault("jsonrpc", "2.0")
        body = json.dumps(message, separators=(",", ":")).encode("utf-8")
        header = f"Content-Length: {len(body)}\r\n\r\n".encode("ascii")
        with self._write_lock:
            assert self.proc.stdin is not None  # opened with PIPE above
            self.proc.stdin.write(header + body)
            self.proc.stdin.flush()

    def _read_frame(self) -> Optional[dict[str, Any]]:
        stdout = self.proc.stdout
        assert stdout is not None  # opened with PIPE above
        length = None
        while True:
            line = stdout.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                break
            name, _, value = line.decode("ascii").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length is None:
            raise ValueError("frame without Content-Length")
        body = stdout.read(length)
        if len(body) < length:
            return None
        return json.loads(body.decode("utf-8"))

    def _read_loop(self) -> None:
        try:
            while True:
                msg = self._read_frame()
                if msg is None:
                    break
                self._dispatch(msg)
        finally:
            self._closed.set()
            with self._lock:
                for slot in self._pending.values():
                    slot["event"].set()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:
            threading.Thread(target=self._answer, args=(msg,), daemon=True).start()
        elif "method" in msg:
            self.notifications.put(msg)
        else:
            with self._lock:
                slot = self._pending.get(msg.get("id"))
            if slot is not None:
                slot["response"] = msg
                slot["event"].set()

    def _answer(self, msg: dict[str, Any]) -> None:
        try:
            result = self.handle_server_request(msg["method"], msg.get("params"))
            self._send({"id": msg["id"], "result": result})
        except CompactdError as err:
            self._send({"id": msg["id"], "error": {"code": err.code, "message": err.message}})

    @staticmethod
    def _default_server_request(method: str, params: Any) -> Any:
        if method == "window/workDoneProgress/create":
            return None
        raise CompactdError(-32601, f"method not found: {method}")

    # -- requests and notifications ----------------------------------------------------------

    def request(self, method: str, params: Any = None, timeout: float = 60.0) -> Any:
        """Sends a request and waits for its answer; raises ``CompactdError`` on an error."""
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            slot: dict[str, Any] = {"event": threading.Event(), "response": None}
            self._pending[rid] = slot
        try:
            message: dict[str, Any] = {"id": rid, "method": method}
            if params is not None:
                message["params"] = params
            self._send(message)
            if not slot["event"].wait(timeout):
                raise TimeoutError(f"{method}: no answer within {timeout} s")
            response = slot["response"]
            if response is None:
                raise CompactdClosed(f"{method}: the daemon closed the connection")
            if "error" in response:
                err = response["error"]
                raise CompactdError(err.get("code", 0), err.get("message", ""), err.get("data"))
            return response.get("result")
        finally:
            with self._lock:
                self._pending.pop(rid, None)

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def wait_notification(
        self,
        method: str,
        predicate: Callable[[dict[str, Any]], bool] = lambda params: True,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Returns the params of the first notification ``method`` matching ``predicate``.

        Notifications read past while waiting are kept, in order, for later waits; ``drain``
        returns and forgets them.
        """
        for i, msg in enumerate(self._backlog):
            if msg["method"] == method and predicate(msg.get("params") or {}):
                del self._backlog[i]
                return msg.get("params") or {}
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {method} notification within {timeout} s")
            try:
                msg = self.notifications.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if self._closed.is_set() and self.notifications.empty():
                    raise CompactdClosed(f"waiting for {method}: the daemon closed the connection")
                continue
            if msg["method"] == method and predicate(msg.get("params") or {}):
                return msg.get("params") or {}
            self._backlog.append(msg)

    def drain(self) -> list[dict[str, Any]]:
        """Every notification received and not yet consumed, oldest first."""
        out, self._backlog = self._backlog, []
        while True:
            try:
                out.append(self.notifications.get_nowait())
            except queue.Empty:
                return out

    # -- lifecycle ---------------------------------------------------------------------------

    def initialize(self, client_name: str = "python-agent", settings: Any = None) -> Any:
        params: dict[str, Any] = {
            "processId": os.getpid(),
            "clientInfo": {"name": client_name, "version": "0.1.0"},
            "capabilities": {},
        }
        if settings is not None:
            params["initializationOptions"] = {"settings": settings}
        result = self.request("initialize", params)
        self.notify("initialized", {})
        return result

    def close(self, timeout: float = 10.0) -> int:
        """``shutdown`` then ``exit``; returns the daemon's exit code."""
        try:
            if not self._closed.is_set():
                self.request("shutdown", None, timeout=timeout)
                self.notify("exit")
        except (CompactdClosed, BrokenPipeError, TimeoutError):
            pass
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(timeout)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        return code

    def __enter__(self) -> "CompactdClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
