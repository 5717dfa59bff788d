"""The asyncio client: the same protocol as ``Client``, on ``asyncio`` subprocess pipes.

Cancelling the task that awaits a request sends ``$/cancelRequest`` for it (and the task
still ends with ``CancelledError``); handlers of server-to-client requests may be coroutines.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import os
import uuid
from typing import Any, Awaitable, Callable, Mapping, Optional, Union, cast

from . import _rpc
from ._rpc import CompactdClosed, CompactdError
from .protocol import AsyncMethods, InitializeResult, ProgressParams, ProgressToken

Handler = Callable[[Any], Union[Any, Awaitable[Any]]]


class AsyncClient(AsyncMethods):
    """A connection to one ``compactd serve`` process. Create it with ``await AsyncClient.start(...)``
    (same options as ``Client``), use it as ``async with``, or call ``await close()``."""

    def __init__(self, proc: asyncio.subprocess.Process, handlers: Mapping[str, Handler]):
        self.proc = proc
        self.handlers = dict(handlers)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._progress: dict[ProgressToken, Callable[[ProgressParams], None]] = {}
        self._progress_all: list[Callable[[ProgressParams], None]] = []
        self._subscribers: dict[str, list[Callable[[Any], None]]] = {}
        self._waiters: list[tuple[str, Callable[[Any], bool], asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = asyncio.Event()
        self._reader = asyncio.create_task(self._read_loop())
        self.initialize_result: InitializeResult

    @classmethod
    async def start(
        cls,
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
    ) -> "AsyncClient":
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = await asyncio.create_subprocess_exec(
            *_rpc.command_line(command, args),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=full_env,
            cwd=cwd,
        )
        client = cls(proc, handlers or {})
        try:
            params = _rpc.initialize_params(client_name, settings, client.handlers, opt_out_notifications)
            client.initialize_result = await client.request("initialize", params, timeout=timeout)
            await client.notify("initialized", {})
        except BaseException:
            proc.kill()
            await proc.wait()
            raise
        return client

    # -- wire ------------------------------------------------------------------------------------

    async def _send(self, message: Mapping[str, Any]) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            raise CompactdClosed("the daemon's stdin is closed")
        try:
            stdin.write(_rpc.encode(message))
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as err:
            raise CompactdClosed(f"the daemon is gone: {err}") from err

    async def _read_loop(self) -> None:
        stdout = self.proc.stdout
        try:
            while stdout is not None:
                try:
                    header = await stdout.readuntil(_rpc.HEADER_END)
                    body = await stdout.readexactly(_rpc.content_length(header[: -len(_rpc.HEADER_END)]))
                except (asyncio.IncompleteReadError, ConnectionResetError):
                    break
                self._dispatch(json.loads(body.decode("utf-8")))
        finally:
            self._closed.set()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(CompactdClosed("the daemon closed the connection"))
            for _, _, future in self._waiters:
                if not future.done():
                    future.set_exception(CompactdClosed("the daemon closed the connection"))

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is not None and "id" in message:
            task = asyncio.create_task(self._answer(message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif method == "$/progress":
            progress = cast(ProgressParams, message.get("params") or {})
            callback = self._progress.get(progress.get("token", ""))
            for listener in ([callback] if callback else []) + list(self._progress_all):
                listener(progress)
        elif method is not None:
            params = message.get("params")
            for subscriber in list(self._subscribers.get(method, [])):
                subscriber(params)
            for waiter in list(self._waiters):
                wanted, predicate, future = waiter
                if wanted == method and not future.done() and predicate(params or {}):
                    future.set_result(params or {})
                    self._waiters.remove(waiter)
                    break
        else:
            answered = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if answered is not None and not answered.done():
                answered.set_result(message)

    async def _answer(self, message: dict[str, Any]) -> None:
        method = message["method"]
        try:
            if method == "window/workDoneProgress/create":
                result = None
            elif method in self.handlers:
                result = self.handlers[method](message.get("params"))
                if inspect.isawaitable(result):
                    result = await result
            else:
                raise CompactdError(method, -32601, f"method not found: {method}")
            reply: dict[str, Any] = {"id": message["id"], "result": result}
        except CompactdError as err:
            reply = {"id": message["id"], "error": {"code": err.code, "message": err.message}}
        except Exception as err:  # a failing handler is "no answer" for the daemon
            reply = {"id": message["id"], "error": {"code": -32603, "message": f"{type(err).__name__}: {err}"}}
        try:
            await self._send(reply)
        except CompactdClosed:
            pass

    # -- requests and notifications --------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: Optional[float] = 60.0,
        on_progress: Optional[Callable[[ProgressParams], None]] = None,
    ) -> Any:
        """Sends a request and awaits its answer; see ``Client.request``. Cancelling the awaiting
        task sends ``$/cancelRequest``."""
        rid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        token = None
        if on_progress is not None:
            params = dict(params or {})
            token = params.setdefault("workDoneToken", f"py-{uuid.uuid4().hex}")
            self._progress[token] = on_progress
        try:
            message: dict[str, Any] = {"id": rid, "method": method}
            if params is not None:
                message["params"] = params
            await self._send(message)
            try:
                response = await asyncio.wait_for(asyncio.shield(future), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"{method}: no answer within {timeout} s") from None
            except asyncio.CancelledError:
                if not self._closed.is_set():
                    try:
                        await self.notify("$/cancelRequest", {"id": rid})
                    except CompactdClosed:
                        pass
                raise
            if "error" in response:
                raise _rpc.error_from(method, response["error"])
            return response.get("result")
        finally:
            self._pending.pop(rid, None)
            if token is not None:
                self._progress.pop(token, None)

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def cancel_progress(self, token: ProgressToken) -> None:
        """Cancels the operation behind a progress token, as an editor's Cancel button does."""
        await self.notify("window/workDoneProgress/cancel", {"token": token})

    def on_progress(self, callback: Callable[[ProgressParams], None]) -> Callable[[], None]:
        """Calls ``callback`` for every ``$/progress``; returns an unsubscribe."""
        self._progress_all.append(callback)
        return lambda: self._progress_all.remove(callback)

    def on(self, method: str, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Calls ``callback(params)`` for each ``method`` notification; returns an unsubscribe."""
        self._subscribers.setdefault(method, []).append(callback)
        return lambda: self._subscribers[method].remove(callback)

    async def wait_notification(
        self, method: str, predicate: Callable[[Any], bool] = lambda params: True, timeout: float = 60.0
    ) -> Any:
        """The params of the next ``method`` notification matching ``predicate`` (from now on)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiter = (method, predicate, future)
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no {method} notification within {timeout} s") from None
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    # -- lifecycle -------------------------------------------------------------------------------

    async def close(self, timeout: float = 10.0) -> int:
        """``shutdown`` then ``exit``; returns the daemon's exit code (0 after a clean shutdown)."""
        try:
            if not self._closed.is_set():
                await self.request("shutdown", None, timeout=timeout)
                await self.notify("exit")
        except (CompactdClosed, CompactdError, TimeoutError):
            pass
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
        await asyncio.wait_for(self._reader, timeout)
        return code

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
