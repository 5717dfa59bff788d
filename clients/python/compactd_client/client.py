"""The synchronous client: ``compactd serve`` as a child process, JSON-RPC over its pipes.

One reader thread parses frames and routes them: answers to the waiting request (by ``id``),
``$/progress`` to progress callbacks, notifications to subscribers and to a queue that
``wait_notification`` reads, and server-to-client requests to ``handlers`` (each answered on
its own thread, so a slow hook never blocks the reader).
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import threading
import time
import uuid
from typing import Any, Callable, Mapping, Optional, cast

from . import _rpc
from ._rpc import CompactdClosed, CompactdError
from .protocol import InitializeResult, ProgressParams, ProgressToken, SyncMethods

Handler = Callable[[Any], Any]
Notification = dict[str, Any]


def _nothing() -> None:
    pass


class Cancellation:
    """Cancels the requests it was passed to (``$/cancelRequest``); ``cancel()`` may come first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def _on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return _nothing

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class Client(SyncMethods):
    """A connection to one ``compactd serve`` process, initialized when constructed.

    ``command`` is the executable (default ``compactd`` on PATH), ``args`` its arguments
    (default ``["serve"]``), ``env`` entries are added to the inherited environment,
    ``settings`` is this connection's settings layer, and ``handlers`` answer server-to-client
    requests by method (``summarizer/summarize``, ``hooks/beforeCompact`` ...): each one given
    is declared as a capability in ``initialize``. Use it as a context manager, or call
    ``close()``.
    """

    def __init__(
        self,
        command: Optional[str] = None,
        args: Optional[list[str]] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        settings: Optional[Mapping[str, Any]] = None,
        handlers: Optional[Mapping[str, Handler]] = None,
        opt_out_notifications: Optional[list[str]] = None,
        client_name: str = "compactd-client-python",
        stderr: Any = None,
        timeout: float = 30.0,
    ):
        self.handlers: dict[str, Handler] = dict(handlers or {})
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            _rpc.command_line(command, args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=full_env,
            cwd=cwd,
        )
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, dict[str, Any]] = {}
        self._closed = threading.Event()
        self._progress: dict[ProgressToken, Callable[[ProgressParams], None]] = {}
        self._progress_all: list[Callable[[ProgressParams], None]] = []
        self._subscribers: dict[str, list[Callable[[Any], None]]] = {}
        self.notifications: "queue.Queue[Notification]" = queue.Queue()
        self._backlog: list[Notification] = []
        self._reader = threading.Thread(target=self._read_loop, name="compactd-reader", daemon=True)
        self._reader.start()
        try:
            params = _rpc.initialize_params(client_name, settings, self.handlers, opt_out_notifications)
            self.initialize_result: InitializeResult = self.request("initialize", params, timeout=timeout)
            self.notify("initialized", {})
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise

    # -- wire ------------------------------------------------------------------------------------

    def _send(self, message: Mapping[str, Any]) -> None:
        data = _rpc.encode(message)
        with self._write_lock:
            if self.proc.stdin is None or self.proc.stdin.closed:
                raise CompactdClosed("the daemon's stdin is closed")
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError) as err:
                raise CompactdClosed(f"the daemon is gone: {err}") from err

    def _read_frame(self) -> Optional[dict[str, Any]]:
        stdout = self.proc.stdout
        if stdout is None:
            return None
        header = b""
        while not header.endswith(_rpc.HEADER_END):
            byte = stdout.read(1)
            if not byte:
                return None
            header += byte
        length = _rpc.content_length(header[: -len(_rpc.HEADER_END)])
        body = stdout.read(length)
        if len(body) < length:
            return None
        message: dict[str, Any] = json.loads(body.decode("utf-8"))
        return message

    def _read_loop(self) -> None:
        try:
            while (message := self._read_frame()) is not None:
                self._dispatch(message)
        finally:
            self._closed.set()
            with self._lock:
                for slot in self._pending.values():
                    slot["event"].set()

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is not None and "id" in message:
            threading.Thread(target=self._answer, args=(message,), daemon=True).start()
        elif method == "$/progress":
            progress = cast(ProgressParams, message.get("params") or {})
            callback = self._progress.get(progress.get("token", ""))
            for listener in ([callback] if callback else []) + list(self._progress_all):
                listener(progress)
        elif method is not None:
            params = message.get("params")
            for subscriber in list(self._subscribers.get(method, [])):
                subscriber(params)
            self.notifications.put(message)
        else:
            with self._lock:
                slot = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if slot is not None:
                slot["response"] = message
                slot["event"].set()

    def _answer(self, message: dict[str, Any]) -> None:
        method = message["method"]
        try:
            if method == "window/workDoneProgress/create":
                result = None
            elif method in self.handlers:
                result = self.handlers[method](message.get("params"))
            else:
                raise CompactdError(method, -32601, f"method not found: {method}")
            reply: dict[str, Any] = {"id": message["id"], "result": result}
        except CompactdError as err:
            reply = {"id": message["id"], "error": {"code": err.code, "message": err.message}}
        except Exception as err:  # a failing handler is "no answer" for the daemon
            reply = {"id": message["id"], "error": {"code": -32603, "message": f"{type(err).__name__}: {err}"}}
        try:
            self._send(reply)
        except CompactdClosed:
            pass

    # -- requests and notifications --------------------------------------------------------------

    def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: Optional[float] = 60.0,
        cancel: Optional[Cancellation] = None,
        on_progress: Optional[Callable[[ProgressParams], None]] = None,
    ) -> Any:
        """Sends a request and waits for its answer (``timeout`` seconds, ``None``: no limit).

        ``cancel`` sends ``$/cancelRequest`` when cancelled; ``on_progress`` receives this
        request's ``$/progress`` (it sets ``workDoneToken``: ``session/compact`` and
        ``session/navigateTree`` take one). Raises ``CompactdError`` for an error answer (a
        cancelled one has ``kind == "cancelled"``) and ``CompactdClosed`` when the daemon is gone.
        """
        rid = next(self._ids)
        slot: dict[str, Any] = {"event": threading.Event(), "response": None}
        token = None
        if on_progress is not None:
            params = dict(params or {})
            token = params.setdefault("workDoneToken", f"py-{uuid.uuid4().hex}")
            self._progress[token] = on_progress
        with self._lock:
            self._pending[rid] = slot
        forget: Callable[[], None] = _nothing if cancel is None else cancel._on_cancel(lambda: self._cancel_request(rid))
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
                raise _rpc.error_from(method, response["error"])
            return response.get("result")
        finally:
            forget()
            with self._lock:
                self._pending.pop(rid, None)
            if token is not None:
                self._progress.pop(token, None)

    def _cancel_request(self, rid: int) -> None:
        try:
            self.notify("$/cancelRequest", {"id": rid})
        except CompactdClosed:
            pass

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def cancel_progress(self, token: ProgressToken) -> None:
        """Cancels the operation behind a progress token, as an editor's Cancel button does."""
        self.notify("window/workDoneProgress/cancel", {"token": token})

    def on_progress(self, callback: Callable[[ProgressParams], None]) -> Callable[[], None]:
        """Calls ``callback`` (on the reader thread) for every ``$/progress``; returns an unsubscribe."""
        self._progress_all.append(callback)
        return lambda: self._progress_all.remove(callback)

    def on(self, method: str, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Calls ``callback(params)`` (on the reader thread) for each ``method`` notification."""
        self._subscribers.setdefault(method, []).append(callback)
        return lambda: self._subscribers[method].remove(callback)

    def wait_notification(
        self,
        method: str,
        predicate: Callable[[Any], bool] = lambda params: True,
        timeout: float = 60.0,
    ) -> Any:
        """The params of the first ``method`` notification matching ``predicate``.

        Notifications read past while waiting are kept, in order, for later waits and ``drain``.
        """
        for i, message in enumerate(self._backlog):
            if message["method"] == method and predicate(message.get("params") or {}):
                del self._backlog[i]
                return message.get("params") or {}
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {method} notification within {timeout} s")
            try:
                message = self.notifications.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if self._closed.is_set() and self.notifications.empty():
                    raise CompactdClosed(f"waiting for {method}: the daemon closed the connection") from None
                continue
            if message["method"] == method and predicate(message.get("params") or {}):
                return message.get("params") or {}
            self._backlog.append(message)

    def drain(self) -> list[Notification]:
        """Every notification received and not consumed yet, oldest first (``method``, ``params``)."""
        out, self._backlog = self._backlog, []
        while True:
            try:
                out.append(self.notifications.get_nowait())
            except queue.Empty:
                return out

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> int:
        """``shutdown`` then ``exit``; returns the daemon's exit code (0 after a clean shutdown)."""
        try:
            if not self._closed.is_set():
                self.request("shutdown", None, timeout=timeout)
                self.notify("exit")
        except (CompactdClosed, CompactdError, TimeoutError):
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

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
