"""What the sync and asyncio clients share: framing, errors, capabilities, the command line."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Callable, Mapping, Optional

from .protocol import ERROR_CODES

#: ``Content-Length: N\r\n\r\n`` then N bytes of UTF-8 JSON (LSP base protocol framing).
HEADER_END = b"\r\n\r\n"

#: The code of a cancelled request (LSP ``RequestCancelled``; compactd's ``cancelled`` kind).
CANCELLED = ERROR_CODES["cancelled"]


class CompactdError(Exception):
    """An error answer: ``method``, ``code``, ``message``, ``kind`` (``data.kind``) and ``data``."""

    def __init__(self, method: str, code: int, message: str, data: Any = None):
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data: dict[str, Any] = data if isinstance(data, dict) else {}
        kind = self.data.get("kind")
        self.kind: Optional[str] = kind if isinstance(kind, str) else None


class CompactdClosed(Exception):
    """The daemon exited or closed its stdout while a request or wait was pending."""


def encode(message: Mapping[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode("utf-8")
    return f"Content-Length: {len(body)}\r\n\r\n".encode("ascii") + body


def content_length(header: bytes) -> int:
    for line in header.split(b"\r\n"):
        name, _, value = line.decode("ascii").partition(":")
        if name.strip().lower() == "content-length":
            return int(value.strip())
    raise ValueError(f"frame without Content-Length: {header!r}")


def error_from(method: str, error: Mapping[str, Any]) -> CompactdError:
    return CompactdError(method, int(error.get("code", 0)), str(error.get("message", "")), error.get("data"))


def command_line(command: Optional[str], args: Optional[list[str]]) -> list[str]:
    """The daemon's command: ``command`` (default ``compactd``, looked up on PATH) and ``args``."""
    exe = command or "compactd"
    if os.sep not in exe and shutil.which(exe) is None:
        raise FileNotFoundError(f"cannot start compactd: {exe!r} is not on PATH (install it with `cargo install --path .`)")
    return [exe, *(args if args is not None else ["serve"])]


def initialize_params(
    client_name: str,
    settings: Optional[Mapping[str, Any]],
    handlers: Mapping[str, Callable[..., Any]],
    opt_out: Optional[list[str]],
) -> dict[str, Any]:
    """``initialize`` params declaring exactly the server-to-client requests ``handlers`` answer."""
    hooks = {method.split("/", 1)[1]: True for method in handlers if method.startswith("hooks/")}
    capabilities: dict[str, Any] = {
        "workDoneProgress": True,
        "window": {"workDoneProgress": True},
        "summarizer": "summarizer/summarize" in handlers,
        "hooks": hooks,
    }
    if opt_out:
        capabilities["optOutNotifications"] = list(opt_out)
    params: dict[str, Any] = {
        "processId": os.getpid(),
        "clientInfo": {"name": client_name, "version": "0.1.0"},
        "capabilities": capabilities,
    }
    if settings is not None:
        params["initializationOptions"] = {"settings": dict(settings)}
    return params
